from outbox import Event, emit, record
from shop.jobs import registry
from shop.models import User
from shop.payloads import Line, Receipt


def register_user(session, email):
    """The business write and the event commit (or roll back) together."""
    user = User(email=email)
    session.add(user)
    session.flush()
    emit(
        session,
        f"user:{user.id}:registered",
        Event("user.registered", {"user_id": user.id}),
        registry=registry,
    )
    return user


def send_receipt(session, user, order_id, lines):
    """A typed job: checked when recorded (a field of the wrong type raises InvalidJob
    and nothing is written), in the same transaction as the order."""
    items = [Line(sku, quantity, cents) for sku, quantity, cents in lines]
    total = sum(line.quantity * line.unit_cents for line in items)
    receipt = Receipt(order_id=order_id, user_id=user.id, lines=items, total_cents=total)
    return record(session, f"order:{order_id}:receipt", receipt)
