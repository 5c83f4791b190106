"""What a model-preparation step cost: wall time, peak GPU memory, peak host RSS.

quantize.py and quality_gate.py run each in their own process (the quantization venv) and
print these figures as ``model-prep-resources: {json}``; the job's log carries them, and
tools/model_prep_sizing.py measured the defaults of ``model_prep:`` from them.
"""

from __future__ import annotations

import resource
import time

GIB = 1024**3


def resources(step: str, started: float, phases: dict[str, float]) -> dict[str, object]:
    """Wall time, peak GPU memory (this process's torch allocator) and peak host RSS."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "step": step,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "wall_s": round(time.monotonic() - started, 1),
        "phases_s": {k: round(v, 1) for k, v in phases.items()},
        "gpu_max_allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 2)
        if cuda
        else None,
        "gpu_max_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 2) if cuda else None,
        # ru_maxrss is in KiB on Linux
        "host_peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    }
