"""The shop's tests: Django's TestCase and outbox's run_tasks, no worker process."""

from django.test import TestCase

from outbox.contrib.django import run_tasks
from shop.models import Order


class CheckoutTest(TestCase):
    def test_the_receipt_is_sent_once_the_order_commits(self) -> None:
        answer = self.client.post("/checkout/", {"email": "a@example.com", "total_cents": 990})
        self.assertEqual(answer.status_code, 201)
        report = run_tasks()
        self.assertEqual([(r.job_name, r.outcome) for r in report.ran],
                         [("shop.tasks.send_receipt", "done")])
        self.assertTrue(Order.objects.get().receipt_sent)

    def test_a_rolled_back_checkout_leaves_no_order_and_no_task(self) -> None:
        answer = self.client.post("/checkout/", {"email": "b@example.com", "total_cents": 0})
        self.assertEqual(answer.status_code, 400)
        self.assertEqual(Order.objects.count(), 0)
        self.assertEqual(len(run_tasks()), 0)
