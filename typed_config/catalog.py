"""SageMaker GPU instance catalog: hardware and on-demand price, with where each figure came from.

Prices are SageMaker real-time inference on-demand, us-east-1, USD per hour. No AWS call is made
at synth (synth runs offline and gives the same template every time), so the figures are static:
each row says its source and date. Verify them
against https://aws.amazon.com/sagemaker/pricing/ before a budget decision; other regions differ.

Adding an instance type (the one way; an unknown type is refused naming this file):

1. Its GPU in :data:`GPUS` if new: the spec-sheet memory, the memory CUDA reports (a vLLM or
   torch log: what ``gpu_memory_utilization`` multiplies) and both sources. A new GPU also needs
   its speed figures in ``sizing/speed_model.py`` (``GPUS`` there: bandwidth, FLOPS, sources).
2. A row in :data:`INSTANCE_CATALOG`: ``_row(name, gpu, gpus, vcpus, host memory GiB,
   price, price source)``. The price is the SageMaker *hosting* (real-time inference) on-demand
   price in us-east-1 (AWS Price List ``USE1-Host:<type>``; the EC2 price is lower and wrong
   here), with where it was read and when. A type whose hardware is known but whose price was not
   found goes in :data:`UNPRICED` instead, which says so: the product refuses to plan a fleet
   whose price it would have to invent.
3. ``tests/infra/test_model_sizing.py`` checks every row has its sources and plans; the
   solver (``make fleet``) then tries the type unless ``fleet.candidates`` names others.
"""

from __future__ import annotations

import difflib
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
class Gpu:
    """One GPU model: the figures every instance type carrying it shares."""

    name: str
    #: Per GPU, marketing size (GB on the spec sheet).
    memory_gb: float
    #: GiB per GPU as CUDA reports it: the base of vLLM's gpu_memory_utilization.
    cuda_memory_gib: float
    cuda_memory_source: str


#: Instance hardware (GPUs, GPU memory, vCPUs, host memory) of every row below, read from AWS's
#: own table: "GPU jobs" in the AWS Batch user guide lists each g4dn/g5/g6/g6e/p4d/p5 size with its
#: GPU count, GPU memory, vCPUs and memory (https://docs.aws.amazon.com/batch/latest/userguide/
#: gpu-jobs.html, read 2026-12); the GPU models from the families' pages
#: (https://aws.amazon.com/ec2/instance-types/g5/, /g6/, /g6e/, /p4/, /p5/).
_HARDWARE = "AWS Batch user guide 'GPU jobs' instance table + aws.amazon.com/ec2/instance-types"

GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        Gpu("T4", 16, 14.75, _CUDA_RECALLED),
        Gpu("A10G", 24, 21.98, _CUDA_24GB),
        Gpu("L4", 24, 21.98, _CUDA_24GB),
        Gpu("L40S", 48, 44.39, _CUDA_RECALLED),
        Gpu("A100 40GB", 40, 39.39, _CUDA_RECALLED),
        Gpu("H100", 80, 79.22, _CUDA_H100),
    )
}


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
    #: Where the GPU count, vCPUs and host memory come from.
    hardware_source: str = _HARDWARE

    @property
    def total_gpu_memory_gib(self) -> float:
        return self.gpu_count * self.gpu_memory_gib

    @property
    def monthly_price(self) -> float:
        return self.price_per_hour * HOURS_PER_MONTH


def _row(
    name: str, gpu: str, gpus: int, vcpus: int, ram_gib: int, price: float, price_source: str
) -> InstanceType:
    """A catalog row: the GPU's memory figures from :data:`GPUS`, the rest as given."""
    g = GPUS[gpu]
    return InstanceType(
        name, gpu, gpus, g.memory_gb, vcpus, ram_gib, price, price_source,
        g.cuda_memory_gib, g.cuda_memory_source,
    )  # fmt: skip


#: aws-samples/foundation-model-benchmarking-tool, fmbench/configs/pricing.yml (AWS's own
#: sample: "SageMaker Hourly Instance Pricing", the hosting price per type); its g5.xlarge,
#: g5.12xlarge, p4d and p5 figures match the rows above to the cent.
_FMBENCH = (
    "SageMaker hosting on-demand, us-east-1, as listed in aws-samples/foundation-model-"
    "benchmarking-tool fmbench/configs/pricing.yml (read 2026-12); not re-checked against "
    "aws.amazon.com/sagemaker/pricing offline"
)
#: Two public documents quoting the AWS Price List offer file for SageMaker in us-east-1
#: (https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonSageMaker/current/us-east-1/
#: index.json, publications of 2026-09-20 and 2026-10-05): the ``USE1-Host:<type>`` row.
_PRICE_LIST = (
    "AWS Price List, AmazonSageMaker us-east-1 offer file, row USE1-Host:<type> (real-time "
    "hosting), as quoted from its 2026-09-20 and 2026-10-05 publications; not re-read offline"
)

INSTANCE_CATALOG: dict[str, InstanceType] = {
    i.name: i
    for i in (
        # the first rows, in this order, are the ones the product was sized and measured on
        # (sizing.speed_evidence takes the first row of each GPU)
        _row("ml.g4dn.xlarge", "T4", 1, 4, 16, 0.736, _SEEDS),
        _row("ml.g5.xlarge", "A10G", 1, 4, 16, 1.408, _SEEDS),
        _row("ml.g5.2xlarge", "A10G", 1, 8, 32, 1.515, _SEEDS),
        _row("ml.g5.12xlarge", "A10G", 4, 48, 192, 7.09, _PUBLIC),
        _row(
            "ml.g6.xlarge",
            "L4",
            1,
            4,
            16,
            1.0056,
            _PUBLIC + "; the AWS Price List quotes of 2026-09/10 give $1.1267 for USE1-Host:"
            "ml.g6.xlarge: check before a budget decision",
        ),
        _row("ml.g6e.xlarge", "L40S", 1, 4, 32, 2.336, _PUBLIC),
        _row("ml.p4d.24xlarge", "A100 40GB", 8, 96, 1152, 37.688, _PUBLIC),
        _row("ml.p5.48xlarge", "H100", 8, 192, 2048, 113.07, _PUBLIC),
        # single-GPU sizes with more host (vCPUs, memory)
        _row("ml.g5.4xlarge", "A10G", 1, 16, 64, 2.03, _FMBENCH),
        _row("ml.g5.8xlarge", "A10G", 1, 32, 128, 3.06, _FMBENCH),
        _row("ml.g6.2xlarge", "L4", 1, 8, 32, 1.222, _PRICE_LIST),
        _row("ml.g6.16xlarge", "L4", 1, 64, 256, 4.246, _PRICE_LIST),
        _row("ml.g6e.2xlarge", "L40S", 1, 8, 64, 2.8026, _PRICE_LIST),
        # multi-GPU sizes
        _row("ml.g5.24xlarge", "A10G", 4, 96, 384, 10.18, _FMBENCH),
        _row("ml.g5.48xlarge", "A10G", 8, 192, 768, 20.36, _FMBENCH),
        _row("ml.g6.12xlarge", "L4", 4, 48, 192, 5.752, _FMBENCH),
        _row("ml.g6.24xlarge", "L4", 4, 96, 384, 8.344, _FMBENCH),
        _row("ml.g6.48xlarge", "L4", 8, 192, 768, 16.688, _FMBENCH),
        _row("ml.g6e.12xlarge", "L40S", 4, 48, 384, 13.1158, _PRICE_LIST),
    )
}

#: SageMaker GPU types whose hardware is known (:data:`_HARDWARE`) but whose us-east-1 hosting
#: price was not found in any source read for this catalog (2026-12: the Price List quotes and
#: the AWS sample above list none of them). The product refuses to plan them rather than invent
#: a price: name -> (GPU, GPUs, vCPUs, host memory GiB). Add the price to move one up.
UNPRICED: dict[str, tuple[str, int, int, int]] = {
    "ml.g5.16xlarge": ("A10G", 1, 64, 256),
    "ml.g6.4xlarge": ("L4", 1, 16, 64),
    "ml.g6.8xlarge": ("L4", 1, 32, 128),
    "ml.g6e.4xlarge": ("L40S", 1, 16, 128),
    "ml.g6e.8xlarge": ("L40S", 1, 32, 256),
    "ml.g6e.16xlarge": ("L40S", 1, 64, 512),
    "ml.g6e.24xlarge": ("L40S", 4, 96, 768),
    "ml.g6e.48xlarge": ("L40S", 8, 192, 1536),
}
UNPRICED_SOURCE = (
    "hardware: " + _HARDWARE + "; price: not found (no us-east-1 SageMaker hosting price for "
    "this type in the sources this catalog was built from)"
)

#: Where an operator adds a type: what an unknown type's error names.
HOW_TO_ADD = (
    "add it to typed_config/catalog.py (its module docstring says how: hardware, the "
    "us-east-1 SageMaker hosting price and their sources)"
)


def unknown_type_message(value: str) -> str:
    """Why ``value`` cannot be planned: not priced (hardware known), or not a catalog type at
    all, with the closest catalog names and how to add one."""
    if value in UNPRICED:
        gpu, count, vcpus, ram = UNPRICED[value]
        return (
            f"instance type {value!r} ({count} x {gpu}, {vcpus} vCPUs, {ram} GiB) has no "
            f"us-east-1 SageMaker hosting price on record, so no fleet on it can be costed; "
            f"{HOW_TO_ADD}"
        )
    close = difflib.get_close_matches(value, list(INSTANCE_CATALOG), n=3, cutoff=0.6)
    hint = f"closest: {', '.join(close)}; " if close else ""
    return (
        f"unknown instance type {value!r}; {hint}the catalog lists "
        f"{len(INSTANCE_CATALOG)} SageMaker GPU types ({', '.join(sorted(INSTANCE_CATALOG))}); "
        f"to plan another, {HOW_TO_ADD}"
    )
