"""The fallback route a client (the platform's gateway) takes to the Bedrock copy of the model when
the SageMaker endpoint answers 5xx or 429: the same chat request, sent to the imported model of
the same adapter through Bedrock Runtime's InvokeModel, answered in the same OpenAI chat form.

    route = FallbackRoute(sagemaker_runtime, bedrock_runtime, endpoint_name="mangaassist-vllm-prod",
                          bedrock_models=imported_models(s3, "s3://bucket/models/bedrock-v1/m-..."))
    answer = route.chat([{"role": "user", "content": "..."}], adapter="manga_domain",
                        max_tokens=256)
    answer.body["choices"][0]["message"]["content"], answer.served_by   # "sagemaker" | "bedrock"

When it falls back, and why only then (each from AWS's InvokeEndpoint API reference,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpoint.html):

- ``ModelError`` (HTTP 424: "Model (owned by the customer in the container) returned 4xx or 5xx
  error code") carrying ``OriginalStatusCode`` 429 or 5xx: the product's admission hook answers
  429 when saturated and 503 while the engine restarts (container/serving/hooks.py);
- ``ServiceUnavailable`` (503), ``InternalFailure`` (500), ``ThrottlingException`` (SageMaker's
  own throttling) and ``ModelNotReadyException`` (no instance ready to serve);
- a connection or read timeout (botocore's ``ReadTimeoutError``/``ConnectTimeoutError``): the
  endpoint did not answer at all.

A client error is never retried elsewhere: ``ValidationError`` and a ``ModelError`` with a 4xx
other than 429 (a bad body, an unknown adapter: 400, an over-long prompt: 413) would fail on
Bedrock too, and sending them there would only double the load of a broken client. An adapter
without a Bedrock copy (``bedrock.models`` names the imported ones) is not fallen back either:
the base model answering for an adapter would be a silent wrong answer.

Imported models take the OpenAI chat-completion body through InvokeModel (models imported after
2025-11-11: seeds 002 section 12; a public measurement found that imports refuse Converse, so
Converse is not used here). A Bedrock copy nobody calls is unloaded after a while and answers
``ModelNotReadyException`` until restored (AWS re:Post, "ModelNotReadyException" with imported
models; ~96 s measured publicly): the fallback reports that as its own failure, naming it, so a
caller knows the fallback was cold (docs/bedrock.md: keeping it warm, and what that costs).

Standard library and botocore only: it runs in whatever process calls the endpoint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError, ConnectTimeoutError, ReadTimeoutError

#: SageMaker Runtime errors that mean "the endpoint could not serve this now" (module docstring).
UNAVAILABLE_CODES = frozenset(
    {"ServiceUnavailable", "InternalFailure", "ThrottlingException", "ModelNotReadyException"}
)
#: Where make bedrock-import records each imported model, under the release's package
#: (``<package uri>/imports/<model>.json``): written by tools/bedrock_import.py, read here.
IMPORTS_DIR = "imports"


def record_name(model: str) -> str:
    return f"{IMPORTS_DIR}/{model}.json"


#: The container answers that SageMaker wraps in ModelError: saturated, or failing.
FALLBACK_STATUSES = frozenset({429}) | frozenset(range(500, 600))


class FallbackFailed(Exception):
    """Neither target answered; the message names why each did not."""


@dataclass(frozen=True)
class Answer:
    """An OpenAI chat-completion answer and the target that served it (and why the fallback
    was taken, when it was)."""

    body: dict[str, Any]
    served_by: str
    fallback_reason: str | None = None


def unavailable(exc: Exception) -> str | None:
    """Why ``exc`` from InvokeEndpoint means the endpoint cannot serve now (fall back), or None
    when it is the request's own fault (do not)."""
    if isinstance(exc, (ReadTimeoutError, ConnectTimeoutError)):
        return f"no answer from the endpoint ({type(exc).__name__})"
    if not isinstance(exc, ClientError):
        return None
    code = str(exc.response.get("Error", {}).get("Code", ""))
    if code in UNAVAILABLE_CODES:
        return f"SageMaker answered {code}"
    if code == "ModelError":
        status = exc.response.get("OriginalStatusCode")
        if isinstance(status, int) and status in FALLBACK_STATUSES:
            return f"the container answered HTTP {status}"
    return None


def chat_request(
    messages: Sequence[Mapping[str, Any]], *, max_tokens: int, temperature: float
) -> dict[str, Any]:
    return {"messages": list(messages), "max_tokens": max_tokens, "temperature": temperature}


class FallbackRoute:
    """SageMaker first; Bedrock's imported model of the same adapter on 5xx or 429."""

    def __init__(
        self,
        sagemaker_runtime: Any,
        bedrock_runtime: Any,
        *,
        endpoint_name: str,
        bedrock_models: Mapping[str, str],
    ) -> None:
        self.sagemaker = sagemaker_runtime
        self.bedrock = bedrock_runtime
        self.endpoint_name = endpoint_name
        #: package model name (an adapter, or "base") -> imported model ARN
        self.bedrock_models = dict(bedrock_models)

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        adapter: str | None,
        max_tokens: int,
        temperature: float = 0.0,
    ) -> Answer:
        request = chat_request(messages, max_tokens=max_tokens, temperature=temperature)
        body = {"model": adapter, **request} if adapter else request
        try:
            resp = self.sagemaker.invoke_endpoint(
                EndpointName=self.endpoint_name,
                ContentType="application/json",
                Accept="application/json",
                Body=json.dumps(body).encode(),
            )
            return Answer(json.loads(resp["Body"].read()), "sagemaker")
        except (ClientError, ReadTimeoutError, ConnectTimeoutError) as exc:
            reason = unavailable(exc)
            if reason is None:
                raise
            arn = self.bedrock_models.get(adapter or "base")
            if arn is None:
                raise FallbackFailed(
                    f"{reason}, and adapter {adapter or 'base'!r} has no Bedrock copy "
                    f"(imported: {sorted(self.bedrock_models)})"
                ) from exc
        try:
            resp = self.bedrock.invoke_model(
                modelId=arn,
                body=json.dumps(request).encode(),
                contentType="application/json",
                accept="application/json",
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            cold = (
                " (the Bedrock copy is cold: restoring)" if code == "ModelNotReadyException" else ""
            )
            raise FallbackFailed(f"{reason}; the Bedrock fallback answered {code}{cold}") from exc
        return Answer(json.loads(resp["body"].read()), "bedrock", reason)


def imported_models(s3: Any, package_uri: str) -> dict[str, str]:
    """The Bedrock copies make bedrock-import recorded for one release's package
    (``<package uri>/imports/<model>.json``): package model name -> imported model ARN."""
    bucket, _, prefix = package_uri.removeprefix("s3://").partition("/")
    base = f"{prefix.rstrip('/')}/{IMPORTS_DIR}/"
    out: dict[str, str] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith(".json"):
                record = json.loads(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
                out[str(record["model"])] = str(record["imported_model_arn"])
    return out
