"""The shop's tasks (on Django 6: ``from django.tasks import task``)."""

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

from shop.models import Order


@task()
def send_receipt(order_id: int) -> str:
    order = Order.objects.get(pk=order_id)
    # ... send the e-mail here ...
    Order.objects.filter(pk=order.pk).update(receipt_sent=True)
    return f"receipt sent to {order.email}"
