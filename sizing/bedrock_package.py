"""Where the Bedrock package is built (container/model_prep/bedrock_package.py): its disk and
memory from measured figures, against the preparation job's and this machine's.

The figures, prod's model (Llama-3-8B architecture, three adapters):

- The bf16 checkpoint is 16,063,572,204 B (measured: docs/measurements/model_prep_h100.md).
  The package holds the base in bf16 and one merged bf16 model per adapter: (1 + 3) x 16.06 GB
  = 64.25 GB, beside the fetched source (16.06 GB, already bf16): 80.3 GB of disk. Adapters are
  a few MB each (rank 16): not counted.
- Host memory: the build holds one source shard, its bf16 copy where the source is not bf16, and
  the merged tensors of that shard (bedrock_package.write_weights); the pessimistic bound used
  here is 3 x the largest shard. prod's model repository (meta-llama/Meta-Llama-3-8B-Instruct)
  ships four safetensors shards of at most 5 GB (transformers' save_pretrained splits at
  ``max_shard_size``), so 15 GB. A source in one 16 GB file would need about 48 GB: the build
  refuses nothing for it, so a machine sized here could run out; the figure is for sharded
  sources.
- No GPU: merging B.A into a weight is one small matrix product per module, on the CPU.

The decision (:func:`placement`): the preparation job (``model_prep``: ml.g6e.xlarge, 40 GB
volume) does not hold 80.3 GB and bills a GPU for CPU work; the package needs a machine with the
disk and the memory above, which is either the caller's (``make bedrock-package`` checks its own
free disk and memory and runs there) or a CPU job: a SageMaker training job on
:data:`CPU_JOB_INSTANCE` with a volume of the disk need x 1.25 (tools/bedrock_package.py starts
it with the preparation job's image and role).
Time: the build is disk- and network-bound (write 64 GB, upload 64 GB); not measured here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The bf16 checkpoint of an 8B Llama-3 architecture model, measured (module docstring).
BF16_CHECKPOINT_BYTES = 16_063_572_204
#: Largest shard of prod's source checkpoint (module docstring).
SHARD_BYTES = 5 * 10**9
#: Host memory the build holds per shard (pessimistic: source, bf16 copy, merged tensors).
SHARDS_IN_MEMORY = 3
#: Disk headroom on a job volume over the computed need.
VOLUME_HEADROOM = 1.25
#: A CPU training instance with 32 GiB of host memory (holds the 15 GB bound twice over).
CPU_JOB_INSTANCE = "ml.m5.2xlarge"
CPU_JOB_MEMORY_BYTES = 32 * 2**30


@dataclass(frozen=True)
class PackageNeed:
    """What building one package takes."""

    models: int
    package_bytes: int
    disk_bytes: int
    memory_bytes: int

    @property
    def volume_gb(self) -> int:
        """A job volume holding it with headroom, in GB (SageMaker's VolumeSizeInGB)."""
        return math.ceil(self.disk_bytes * VOLUME_HEADROOM / 10**9)


def package_need(*, adapters: int, checkpoint_bytes: int = BF16_CHECKPOINT_BYTES) -> PackageNeed:
    """The package of a base of ``checkpoint_bytes`` (bf16) and ``adapters`` merged models."""
    models = 1 + adapters
    package = models * checkpoint_bytes
    shard = min(SHARD_BYTES, checkpoint_bytes)
    return PackageNeed(
        models=models,
        package_bytes=package,
        disk_bytes=package + checkpoint_bytes,
        memory_bytes=SHARDS_IN_MEMORY * shard,
    )


@dataclass(frozen=True)
class Placement:
    """Where the package is built, and why."""

    where: str  # "here" | "cpu-job"
    reason: str


def placement(
    need: PackageNeed,
    *,
    prep_volume_gb: int,
    free_disk_bytes: int,
    memory_bytes: int,
) -> Placement:
    """Here when this machine holds the need, else a CPU job of the computed size; never the
    preparation job (module docstring: its volume is too small and it bills a GPU)."""
    figures = (
        f"the package is {need.package_bytes / 10**9:.1f} GB ({need.models} models in bf16); "
        f"building it needs {need.disk_bytes / 10**9:.1f} GB of disk and "
        f"{need.memory_bytes / 2**30:.1f} GiB of memory"
    )
    if free_disk_bytes >= need.disk_bytes and memory_bytes >= need.memory_bytes:
        return Placement("here", f"{figures}; this machine has both")
    return Placement(
        "cpu-job",
        f"{figures}; this machine has {free_disk_bytes / 10**9:.1f} GB free and "
        f"{memory_bytes / 2**30:.1f} GiB; the preparation job's volume is {prep_volume_gb} GB "
        f"(and a GPU): a CPU job ({CPU_JOB_INSTANCE}, {need.volume_gb} GB volume) is the place",
    )
