"""`make image-size`: measure the product's own layers on the tiny image `make test-image` builds.

Writes docs/measurements/image_size.json: the layers above the base image (everything the
product's Dockerfile adds), and of those the model layer (``COPY --from=model ... /opt/ml/model``),
which sizing.scale_out_time replaces with the config's weights and adapters when it sizes the GPU
image. ``tests/image`` compares the committed figure with the image it builds.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools import REPO_ROOT

OUT = REPO_ROOT / "docs" / "measurements" / "image_size.json"


def history(engine: Sequence[str], image: str) -> list[dict[str, Any]]:
    """``<engine> history``, newest layer first."""
    out = subprocess.run(
        [*engine, "history", "--format", "json", image], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out)


def measure(engine: Sequence[str], image: str, base: str) -> dict[str, Any]:
    """The layers of ``image`` above ``base`` (history entries beyond the base's count)."""
    top, below = history(engine, image), history(engine, base)
    if len(top) <= len(below):
        raise SystemExit(f"{image} has no layers above {base}: is it built FROM it?")
    own = top[: len(top) - len(below)]
    layers: list[dict[str, Any]] = []
    for h in own:
        made_by = str(h.get("CreatedBy") or h.get("created_by") or "")
        layers.append(
            {
                "bytes": int(h.get("size") or h.get("Size") or 0),
                "created_by": " ".join(made_by.split())[:160],
            }
        )
    model = [
        x
        for x in layers
        if "COPY" in str(x["created_by"]) and " in /opt/ml/model" in str(x["created_by"])
    ]
    if len(model) != 1:
        raise SystemExit(
            f"expected one layer that copies /opt/ml/model in {image}, found {len(model)}"
        )
    return {
        "image": image,
        "base": base,
        "product_bytes": sum(x["bytes"] for x in layers),
        "model_layer_bytes": model[0]["bytes"],
        "layers": [x for x in layers if x["bytes"]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", default="podman")
    parser.add_argument("--image", required=True)
    parser.add_argument("--base", required=True)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    result = measure(shlex.split(args.engine), args.image, args.base)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{args.image}: {result['product_bytes'] / 1e6:,.1f} MB above {args.base} "
        f"(model layer {result['model_layer_bytes'] / 1e6:,.1f} MB) -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
