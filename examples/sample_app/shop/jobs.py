"""The shop's jobs: two listeners of "user.registered" and a nightly periodic job."""

from outbox import Registry

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


@registry.periodic("0 3 * * *", name="shop.nightly", timezone="Europe/Berlin")
def nightly(payload, ctx):
    ctx.log.info("nightly tidy")
