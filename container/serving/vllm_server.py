"""vLLM's OpenAI/SageMaker API server (``vllm.entrypoints.openai.api_server``), with SO_REUSEPORT
on its listening socket.

Why: when the engine dies, the old API server stays up (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1) and
its hooks answer /ping and every request with 503 + Retry-After while the entrypoint starts a
new vLLM beside it. The new server binds the same port while the old one still listens, which
Linux allows only when both sockets set SO_REUSEPORT (same user); vLLM 0.32 sets it only for
multi-API-server runs (``setup_server(args, reuse_port=num_api_servers > 1)``). Once the new
engine answers /health, the entrypoint stops the old server: the port never goes unanswered.

Run as ``python -m <pkg>.vllm_server <vllm serve flags>``.
"""

from __future__ import annotations

import socket
from typing import Any


def _patch_reuse_port() -> None:
    from vllm.entrypoints.launchers import launcher

    create = launcher.create_server_socket

    def create_server_socket(addr: tuple[str, int], *, reuse_port: bool) -> socket.socket:
        return create(addr, reuse_port=True)

    launcher.create_server_socket = create_server_socket


def main(argv: Any = None) -> None:
    _patch_reuse_port()
    from vllm.entrypoints.launchers.api_server.entry import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
