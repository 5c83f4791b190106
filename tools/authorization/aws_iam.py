"""The Service Authorization Reference and IAM's evaluation, through aws_iam.mjs beside this.

One Node process per call, fed a batch: the check asks for every action at once, then
simulates every request at once.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import tools  # noqa: F401  (puts the venv's Node on PATH)

BRIDGE = Path(__file__).with_name("aws_iam.mjs")
REPO_ROOT = Path(__file__).resolve().parents[2]


class BridgeError(RuntimeError):
    """The Node bridge could not answer (no node_modules, no Node): says the fix."""


def _ask(payload: Mapping[str, Any]) -> dict[str, Any]:
    if not (REPO_ROOT / "node_modules/@cloud-copilot/iam-simulate").is_dir():
        raise BridgeError(
            "node_modules/@cloud-copilot/iam-simulate is missing: run `make node_modules/.stamp` "
            "(npm install of package.json's pinned IAM data and evaluator)"
        )
    try:
        done = subprocess.run(
            ["node", str(BRIDGE)],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            check=False,
        )
    except FileNotFoundError as e:
        raise BridgeError(
            "no `node` on PATH: run through make, which puts the venv's Node first"
        ) from e
    if done.returncode != 0:
        raise BridgeError(
            f"{BRIDGE.name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    return json.loads(done.stdout)


@dataclass(frozen=True)
class ResourceType:
    """One resource type an action names (Service Authorization Reference)."""

    name: str
    required: bool
    #: ``arn:${Partition}:...`` as the reference writes it.
    arn: str

    def matches(self, arn: str) -> bool:
        """Whether ``arn`` names one resource of this type (each ``${...}`` one or more
        characters, never a wildcard: a pattern such as ``bucket/*`` names objects)."""
        parts = re.split(r"\$\{[^}]+\}", self.arn)
        pattern = "[^*?]+?".join(re.escape(p) for p in parts)
        return re.fullmatch(pattern, arn) is not None


@dataclass(frozen=True)
class Action:
    name: str
    exists: bool
    wildcard_only: bool
    resource_types: tuple[ResourceType, ...]

    @property
    def required(self) -> tuple[ResourceType, ...]:
        return tuple(t for t in self.resource_types if t.required)


@cache
def _describe(actions: tuple[str, ...]) -> tuple[dict[str, Action], str]:
    answer = _ask({"actions": list(actions)})
    found = {
        name: Action(
            name,
            a["exists"],
            a["wildcardOnly"],
            tuple(ResourceType(t["name"], t["required"], t["arn"]) for t in a["resourceTypes"]),
        )
        for name, a in answer["actions"].items()
    }
    return found, answer["version"]


def describe(actions: Iterable[str]) -> dict[str, Action]:
    """``{action: Action}`` from the pinned Service Authorization Reference data."""
    return _describe(tuple(sorted(set(actions))))[0]


def data_version() -> str:
    """The reference data's version (``0.<major>.<YYYYMMDD><n>``: the date AWS's data was read)."""
    return _describe(("sts:GetCallerIdentity",))[1]


@cache
def resource_types(types: tuple[tuple[str, str], ...]) -> dict[tuple[str, str], ResourceType]:
    """``{(service, resource type): ResourceType}`` (its ARN format) from the reference."""
    answer = _ask({"resourceTypes": [list(t) for t in types]})["resourceTypes"]
    return {(s, t): ResourceType(t, False, answer[f"{s}:{t}"]["arn"]) for s, t in types}


@dataclass(frozen=True)
class Request:
    """One request a principal makes: the action on one resource, with its request context."""

    principal: str
    action: str
    resource: str
    #: Why the principal makes it (the template resource, the code path), for the failure message.
    why: str
    #: ``((key, value), ...)``: the request context IAM's conditions read.
    context: tuple[tuple[str, Any], ...] = ()
    #: The resource's own policy as JSON (a KMS key's key policy: KMS requires it to allow,
    #: https://docs.aws.amazon.com/kms/latest/developerguide/key-policies.html), or None.
    resource_policy: str | None = None


def simulate(
    requests: Sequence[Request],
    policies: Mapping[str, Sequence[Mapping[str, Any]]],
    account: str,
) -> list[str]:
    """IAM's decision for each request under its principal's identity policies
    (``Allowed``, ``ImplicitlyDenied``, ``ExplicitlyDenied``; ``Error: ...`` for input the
    evaluator refuses, such as an ARN of the wrong form for the action)."""
    if not requests:
        return []
    answer = _ask(
        {
            "simulate": [
                {
                    "policies": list(policies[r.principal]),
                    "action": r.action,
                    "resource": r.resource,
                    "account": account,
                    # IAM puts the resource owner's account in every request's context
                    # (aws:ResourceAccount, IAM User Guide, "AWS global condition context
                    # keys"); every resource judged here is the deployment's account's.
                    "context": {"aws:ResourceAccount": account, **dict(r.context)},
                    "resourcePolicy": json.loads(r.resource_policy) if r.resource_policy else None,
                }
                for r in requests
            ]
        }
    )
    return [
        res["result"] if res["result"] != "Error" else f"Error: {json.dumps(res['errors'])}"
        for res in answer["results"]
    ]
