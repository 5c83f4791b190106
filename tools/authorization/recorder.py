"""Record every AWS call the product's own code makes, with the principal that makes it.

Installed around a test session (tests/lambdas/conftest.py): every botocore call (real, moto or
Stubber) and every client method a test replaces with its own function is recorded with its
operation, its parameters and the principal whose code made it: the first frame, walking out
from the call, in a file under one of ``principals``' paths. A call made in a worker thread (S3's
managed transfers run their requests in a thread pool) is the principal's whose code submitted
the work to the pool.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.client import BaseClient

#: botocore signing names that are not the service's IAM prefix.
IAM_PREFIX = {"monitoring": "cloudwatch", "runtime.sagemaker": "sagemaker"}


@dataclass(frozen=True)
class Call:
    principal: str
    #: ``sagemaker:UpdateEndpoint``: the IAM prefix and the API operation.
    operation: str
    #: The request's parameters as JSON (sorted keys).
    params: str

    @property
    def parameters(self) -> dict[str, Any]:
        return json.loads(self.params)


class Recorder:
    def __init__(self, principals: Mapping[str, str], *, not_ours: tuple[str, ...] = ()) -> None:
        """``principals``: ``{fragment: principal}``, each fragment matched against
        ``<file path>:<function name>`` of each frame (a path fragment, or a path and one
        function: ``tools/preflight.py:token_secret_check``); the first that matches wins.
        ``not_ours``: fragments of code that acts for no principal (the tests' own fakes: a fake
        that a principal's call runs into and that calls AWS itself is the test world acting,
        not the principal). Walking out from a call, the first fragment met decides."""
        self.principals = dict(principals)
        self.not_ours = not_ours
        self.calls: list[Call] = []
        self._saved: dict[str, Any] = {}
        #: ``inherited``: the principal that submitted the work this worker thread runs.
        self._thread = threading.local()

    def _principal(self, depth: int = 2) -> str | None:
        frame = sys._getframe(depth + 1)
        while frame is not None:
            name = f"{frame.f_code.co_filename}:{frame.f_code.co_name}"
            for fragment, principal in self.principals.items():
                if fragment in name:
                    return principal
            if any(fragment in name for fragment in self.not_ours):
                return None
            frame = frame.f_back  # type: ignore[assignment]
        return getattr(self._thread, "inherited", None)

    def _record(self, client: BaseClient, operation: str, params: Mapping[str, Any]) -> None:
        principal = self._principal()
        if principal is None:
            return
        model = client.meta.service_model
        prefix = (
            IAM_PREFIX.get(model.signing_name or "", model.signing_name) or model.endpoint_prefix
        )
        self.calls.append(
            Call(
                principal, f"{prefix}:{operation}", json.dumps(params, sort_keys=True, default=str)
            )
        )

    def install(self) -> None:
        recorder = self
        real_call = BaseClient._make_api_call

        def make_api_call(client: BaseClient, operation: str, params: Any) -> Any:
            recorder._record(client, operation, params)
            return real_call(client, operation, params)

        def setattr_(client: BaseClient, name: str, value: Any) -> None:
            operation = (
                client.meta.method_to_api_mapping.get(name) if "meta" in vars(client) else None
            )
            if operation is not None and callable(value):
                value = _recorded(recorder, client, operation, value)
            object.__setattr__(client, name, value)

        real_submit = ThreadPoolExecutor.submit

        def submit(
            executor: ThreadPoolExecutor, fn: Callable[..., Any], /, *a: Any, **k: Any
        ) -> Any:
            inherited = recorder._principal(depth=1)

            def run(*args: Any, **kwargs: Any) -> Any:
                outer = getattr(recorder._thread, "inherited", None)
                recorder._thread.inherited = inherited
                try:
                    return fn(*args, **kwargs)
                finally:
                    recorder._thread.inherited = outer

            return real_submit(executor, run, *a, **k)

        self._saved = {"_make_api_call": real_call, "__setattr__": BaseClient.__setattr__}
        self._saved_submit = real_submit
        BaseClient._make_api_call = make_api_call
        BaseClient.__setattr__ = setattr_
        ThreadPoolExecutor.submit = submit  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        for name, value in self._saved.items():
            setattr(BaseClient, name, value)
        if self._saved:
            ThreadPoolExecutor.submit = self._saved_submit  # type: ignore[method-assign]


def _recorded(
    recorder: Recorder, client: BaseClient, operation: str, fn: Callable[..., Any]
) -> Any:
    """A test's stand-in for one client method, recorded as the call it stands in for."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        recorder._record(client, operation, kwargs)
        return fn(*args, **kwargs)

    return call
