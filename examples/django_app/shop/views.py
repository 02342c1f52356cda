"""Checkout: the order and its receipt task commit together, or neither does."""

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from shop.models import Order
from shop.tasks import send_receipt


@csrf_exempt
def checkout(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return HttpResponse(status=405)
    try:
        total = int(request.POST["total_cents"])
    except (KeyError, ValueError):
        return JsonResponse({"error": "total_cents must be a whole number"}, status=400)
    with transaction.atomic():
        order = Order.objects.create(email=request.POST.get("email", ""), total_cents=total)
        receipt = send_receipt.enqueue(order.id)
        if total <= 0:  # a rule checked after the writes: the rollback takes both back
            transaction.set_rollback(True)
            return JsonResponse({"error": "the total must be positive"}, status=400)
    return JsonResponse({"order": order.id, "task": receipt.id}, status=201)
