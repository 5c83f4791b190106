"""SageMaker GPU instance catalog: hardware and on-demand price, with where each price came from.

Prices are SageMaker real-time inference on-demand, us-east-1, USD per hour. No AWS call is made
at synth (DESIGN.md), so the figures are static: each row says its source and date. Verify them
against https://aws.amazon.com/sagemaker/pricing/ before a budget decision; other regions differ.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICE_REGION = "us-east-1"
HOURS_PER_MONTH = 730  # AWS's own monthly convention (8,760 h / 12)

_SEEDS = "seeds/002 section 3 (MangaAssist, validated 2026-03-25)"
_PUBLIC = "public SageMaker pricing as quoted in 2025-10..2026-03 articles; not re-checked offline"


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpu: str
    gpu_count: int
    gpu_memory_gib: float  # per GPU
    vcpus: int
    ram_gib: int
    price_per_hour: float
    price_source: str
    #: Nitro instance storage (NVMe), hardware-encrypted. SageMaker rejects an EndpointConfig
    #: KmsKeyId when any variant runs on such a type (CreateEndpointConfig API reference).
    local_nvme: bool = True

    @property
    def total_gpu_memory_gib(self) -> float:
        return self.gpu_count * self.gpu_memory_gib

    @property
    def monthly_price(self) -> float:
        return self.price_per_hour * HOURS_PER_MONTH


INSTANCE_CATALOG: dict[str, InstanceType] = {
    i.name: i
    for i in (
        InstanceType("ml.g4dn.xlarge", "T4", 1, 16, 4, 16, 0.736, _SEEDS),
        InstanceType("ml.g5.xlarge", "A10G", 1, 24, 4, 16, 1.408, _SEEDS),
        InstanceType("ml.g5.2xlarge", "A10G", 1, 24, 8, 32, 1.515, _SEEDS),
        InstanceType("ml.g5.12xlarge", "A10G", 4, 24, 48, 192, 7.09, _PUBLIC),
        InstanceType("ml.g6.xlarge", "L4", 1, 24, 4, 16, 1.0056, _PUBLIC),
        InstanceType("ml.g6e.xlarge", "L40S", 1, 48, 4, 32, 2.336, _PUBLIC),
        InstanceType("ml.p4d.24xlarge", "A100 40GB", 8, 40, 96, 1152, 37.688, _PUBLIC),
        InstanceType("ml.p5.48xlarge", "H100", 8, 80, 192, 2048, 113.07, _PUBLIC),
    )
}
