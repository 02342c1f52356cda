from outbox import Event, emit
from shop.jobs import registry
from shop.models import User


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
