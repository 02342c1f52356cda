"""The shop's typed payloads. Each type carries its job name, so a producer needs only
this module, and `outbox schema shop.receipt --app shop.jobs:registry` prints the JSON
Schema the services on the other side of the queue read (the docs site's page of it,
docs/reference/example-schemas.md, is generated from that output)."""

from dataclasses import dataclass
from typing import Literal

from outbox import job_type


@dataclass
class Line:
    sku: str
    quantity: int
    unit_cents: int


def receipt_from_v1(data, from_version):
    # Version 1 carried the total as a float in euros; version 2 keeps integer cents
    # and names the currency. Receipts still queued under version 1 arrive upgraded.
    data["total_cents"] = round(data.pop("total") * 100)
    data["currency"] = "EUR"
    return data


@job_type("shop.receipt", queue="mail", version=2, upgrade=receipt_from_v1)
@dataclass
class Receipt:
    order_id: int
    user_id: int
    lines: list[Line]
    total_cents: int
    currency: Literal["EUR", "USD"] = "EUR"
    note: str | None = None
