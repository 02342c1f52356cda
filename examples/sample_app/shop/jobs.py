"""The shop's jobs: two listeners of "user.registered", a typed receipt job and a
nightly periodic job."""

from outbox import Registry
from shop.payloads import Receipt

registry = Registry()
outage = {"crm": False}  # flipped by a test to make the CRM sync fail


def welcome_email(payload, ctx):
    # Transactional: the email row and the job's acknowledgement commit together.
    # ctx.connection is the plain DB-API connection, under a worker and in tests alike;
    # int() keeps the literal safe whatever its placeholder style.
    cursor = ctx.connection.cursor()
    cursor.execute(
        f"INSERT INTO shop_emails (user_id, kind) VALUES ({int(payload['user_id'])}, 'welcome')"
    )
    cursor.close()


def crm_sync(payload, ctx):
    if outage["crm"]:
        raise ConnectionError("CRM unavailable")


registry.listen("user.registered", welcome_email, name="shop.welcome_email", transactional=True)
registry.listen("user.registered", crm_sync, name="shop.crm_sync", queue="crm")


@registry.job("shop.receipt", transactional=True)
def receipt(payload: Receipt, ctx):
    # The handler gets a Receipt (upgraded from version 1 if it was queued as one).
    cursor = ctx.connection.cursor()
    cursor.execute(
        f"INSERT INTO shop_emails (user_id, kind) VALUES ({int(payload.user_id)}, 'receipt')"
    )
    cursor.close()


@registry.periodic("0 3 * * *", name="shop.nightly", timezone="Europe/Berlin")
def nightly(payload, ctx):
    ctx.log.info("nightly tidy")
