"""Write config/schema.json: the JSON Schema of a deployment config, for editors.

Generated from :class:`typed_config.DeploymentConfig` (pydantic's ``model_json_schema()``, JSON
Schema draft 2020-12), so the schema cannot say anything the loader does not: each field's
description is its docstring (``use_attribute_docstrings``, typed_config.base.Strict), and a section
written empty takes null as the loader does (:func:`_or_null`). The YAML files under
config/ name it on their first line (``# yaml-language-server: $schema=...``), which the YAML
language server (VS Code's Red Hat YAML extension, Neovim, Helix, JetBrains) reads to complete
keys and flag unknown ones while typing. tests/infra/test_config_schema.py fails when the committed
file differs from what this module generates. Regenerate with ``python -m tools.schema``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tools import REPO_ROOT
from typed_config import DeploymentConfig
from typed_config.base import empty_means_default

SCHEMA_PATH = REPO_ROOT / "config" / "schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"
REGENERATE = "python -m tools.schema"
#: Required by the model but filled in by the loader when a file omits them (``parse_config``
#: defaults ``env`` to the environment selected), so a file may leave them out.
LOADER_DEFAULTED = frozenset({"env"})


def render() -> str:
    """The schema as committed: keys sorted, two-space indent, one trailing newline."""
    schema = {"$schema": DIALECT, **DeploymentConfig.model_json_schema()}
    schema["required"] = [k for k in schema["required"] if k not in LOADER_DEFAULTED]
    empty = [
        (schema if model is DeploymentConfig else schema["$defs"][model.__name__], name)
        for model in _models(DeploymentConfig)
        for name in empty_means_default(model)
    ]
    refs = json.dumps(schema)
    for where, name in empty:
        where["properties"][name] = _or_null(schema, where["properties"][name], refs)
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every config model under it (each once)."""
    found: list[type[BaseModel]] = []

    def visit(annotation: object) -> None:
        model = annotation if isinstance(annotation, type) else None
        if model is not None and issubclass(model, BaseModel) and model not in found:
            found.append(model)
            for field in model.model_fields.values():
                visit(field.annotation)
        for arg in getattr(annotation, "__args__", ()) or ():
            visit(arg)
        for meta in getattr(annotation, "__metadata__", ()) or ():
            visit(meta)

    visit(root)
    return found


def _or_null(schema: dict[str, Any], prop: dict[str, Any], refs: str) -> dict[str, Any]:
    """A property that also takes null (an empty section means its defaults: typed_config.base),
    saying so as precisely as JSON Schema allows, so an editor still names the wrong key inside:
    an array or object type gains "null"; a section whose model only such properties refer to
    gains it in its definition; any other one becomes ``anyOf: [the property, null]``."""
    if isinstance(prop.get("type"), str):
        return {**prop, "type": [prop["type"], "null"]}
    ref = prop.get("$ref")
    if isinstance(ref, str) and refs.count(f'"$ref": "{ref}"') == 1:
        definition = schema["$defs"][ref.removeprefix("#/$defs/")]
        definition["type"] = [definition["type"], "null"]
        return prop
    kept = {k: v for k, v in prop.items() if k in ("default", "description", "title")}
    rest = {k: v for k, v in prop.items() if k not in kept}
    return {**kept, "anyOf": [rest, {"type": "null"}]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SCHEMA_PATH, help="default: %(default)s")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the file differs, without writing"
    )
    args = parser.parse_args(argv)
    text = render()
    current = args.out.read_text() if args.out.exists() else None
    if args.check:
        if current != text:
            print(f"{args.out} is out of date: run {REGENERATE}", file=sys.stderr)
            return 1
        print(f"{args.out} is current")
        return 0
    if current != text:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(f"{args.out} unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
