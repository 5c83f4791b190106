"""SageMaker GPU instance catalog: hardware and on-demand price, with where each figure came from.

Prices are SageMaker real-time inference on-demand, us-east-1, USD per hour. No AWS call is made
at synth (synth runs offline and gives the same template every time), so the figures are static:
each row says its source and date. Verify them
against https://aws.amazon.com/sagemaker/pricing/ before a budget decision; other regions differ.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICE_REGION = "us-east-1"
HOURS_PER_MONTH = 730  # AWS's own monthly convention (8,760 h / 12)

_SEEDS = "the MangaAssist team's production figures (validated 2026-03-25)"
_PUBLIC = "public SageMaker pricing as quoted in 2025-10..2026-03 articles; not re-checked offline"

# Memory CUDA reports per GPU (torch.cuda.mem_get_info()[1], what vLLM multiplies by
# gpu_memory_utilization), not the marketing size: the driver keeps ~0.4-0.5 GiB of every card.
_CUDA_24GB = (
    "vLLM/torch logs on 24 GB-class A10/A10G/L4 cards report 21.96-22.18 GiB total (e.g. "
    "vllm-project/vllm#17835 'a total capacity of 21.98 GiB', vllm-project/vllm#928 (A10) "
    "'22.06 GiB total capacity'); the low end of that range is taken"
)
_CUDA_H100 = "vllm-project/vllm PR #10511 start-up log: 'total_gpu_memory 79.22GiB'"
_CUDA_RECALLED = (
    "torch's 'total capacity' as commonly seen in CUDA OOM messages for this GPU; not re-checked "
    "against a log here, so the capacity of this type is an estimate"
)


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpu: str
    gpu_count: int
    gpu_memory_gib: float  # per GPU, marketing size (GB on the spec sheet)
    vcpus: int
    ram_gib: int
    price_per_hour: float
    price_source: str
    #: GiB per GPU as CUDA reports it: the base of vLLM's gpu_memory_utilization.
    cuda_memory_gib: float
    cuda_memory_source: str
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
        InstanceType("ml.g4dn.xlarge", "T4", 1, 16, 4, 16, 0.736, _SEEDS, 14.75, _CUDA_RECALLED),
        InstanceType("ml.g5.xlarge", "A10G", 1, 24, 4, 16, 1.408, _SEEDS, 21.98, _CUDA_24GB),
        InstanceType("ml.g5.2xlarge", "A10G", 1, 24, 8, 32, 1.515, _SEEDS, 21.98, _CUDA_24GB),
        InstanceType("ml.g5.12xlarge", "A10G", 4, 24, 48, 192, 7.09, _PUBLIC, 21.98, _CUDA_24GB),
        InstanceType("ml.g6.xlarge", "L4", 1, 24, 4, 16, 1.0056, _PUBLIC, 21.98, _CUDA_24GB),
        InstanceType("ml.g6e.xlarge", "L40S", 1, 48, 4, 32, 2.336, _PUBLIC, 44.39, _CUDA_RECALLED),
        InstanceType(
            "ml.p4d.24xlarge", "A100 40GB", 8, 40, 96, 1152, 37.688, _PUBLIC, 39.39, _CUDA_RECALLED
        ),
        InstanceType(
            "ml.p5.48xlarge", "H100", 8, 80, 192, 2048, 113.07, _PUBLIC, 79.22, _CUDA_H100
        ),
    )
}
