"""The brief's own fleet, priced at list beside the budget it quotes (issue 42: the $9,200 budget
was printed with no comparison, and it is about 2.2x the list price of the fleet it paid for).

The brief (the MangaAssist pack the product was specified from) states the fleet and its spend:

- ``000_fd5aaeaa804144d2.txt``, "Measured Impact Summary": "production benchmarks on
  MangaAssist's self-hosted Llama-3-8B-Instruct path running on ml.g5.xlarge"; "GPU instances
  required 8 -> 4"; "Monthly GPU spend $18,400 -> $9,200".
- ``001_befc817dbb29484d.txt``, the impact table: "GPU instances | 8 | 4", "Monthly cost |
  $18.4K | $9.2K".

(``002_468d97e75814f289.txt``'s deployment example adds a one-instance canary at 5 % to the four;
the brief's tables count four, and so does this.) The list price is the catalog's
(typed_config.catalog: SageMaker hosting on-demand, us-east-1, x 730 h), so the gap between
the budget and the list price is what the brief's figure carries beyond its own instances.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from typed_config.catalog import INSTANCE_CATALOG

#: Where the brief states its fleet and budget (the files of the product brief's pack).
BRIEF_FLEET_SOURCE = (
    "the brief's 000_fd5aaeaa804144d2.txt 'Measured Impact Summary' and "
    "001_befc817dbb29484d.txt's impact table"
)


@dataclass(frozen=True)
class BriefFleet:
    """A fleet the brief states: ``count`` x ``instance_type`` and the monthly spend it quotes."""

    instance_type: str
    count: int
    budget_usd_per_month: float
    source: str

    def __post_init__(self) -> None:
        if self.instance_type not in INSTANCE_CATALOG:
            raise ValueError(f"{self.instance_type}: not in typed_config/catalog.py")
        if self.count < 1 or self.budget_usd_per_month <= 0:
            raise ValueError("a fleet has at least one instance and a positive budget")

    @property
    def list_usd_per_month(self) -> float:
        """``count`` instances at the catalog's on-demand price, every hour of a 730-hour month."""
        return self.count * INSTANCE_CATALOG[self.instance_type].monthly_price

    def as_dict(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "count": self.count,
            "list_usd_per_month": round(self.list_usd_per_month, 2),
            "budget_usd_per_month": self.budget_usd_per_month,
            "source": self.source,
        }


#: The brief's fleet: 4 x ml.g5.xlarge for $9,200/month.
BRIEF_FLEET = BriefFleet("ml.g5.xlarge", 4, 9_200.0, BRIEF_FLEET_SOURCE)


def brief_fleet_line(fleet: dict[str, Any]) -> str:
    """The plan's line for :meth:`BriefFleet.as_dict`: the list price beside the quoted budget."""
    price, budget = fleet["list_usd_per_month"], fleet["budget_usd_per_month"]
    return (
        f"the brief's fleet ({fleet['count']} x {fleet['instance_type']}, always on) at list: "
        f"${price:,.0f}/month vs its budget ${budget:,.0f} ({budget / price:.2f}x its list "
        f"price; {fleet['source']})"
    )
