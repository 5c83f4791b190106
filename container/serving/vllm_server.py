"""vLLM's OpenAI/SageMaker API server (``vllm.entrypoints.openai.api_server``) on a listening
socket the entrypoint owns, and retirable without resetting a connection.

Why: when the engine dies, the old API server stays up (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1) and
its hooks answer /ping and every request with 503 + Retry-After while the entrypoint starts a
new vLLM beside it. Both servers must take connections from the port without a gap, and the old
one must leave without dropping any.

- **One socket.** The entrypoint binds the port once (:func:`bind_socket`) and hands the same
  socket to every vLLM server it starts (file descriptor ``LISTEN_FD_ENV``); vLLM's
  ``create_server_socket`` is replaced to use it. Connections queue in one accept queue that
  outlives any one server. (Two sockets with SO_REUSEPORT, the earlier design, give each
  server its own queue: the connections the kernel had queued for the old server when it
  closed its socket were reset. A fresh-clone CI run failed on exactly that.)
- **Retire, then stop.** ``RETIRE_SIGNAL`` makes a server stop accepting (its copy of the socket
  closes; the others keep it open), wait until every connection it holds is answered and closed
  (not-ready answers carry ``Connection: close``; an idle keep-alive connection closes after
  uvicorn's keep-alive timeout), at most ``RETIRE_WAIT_SECONDS``, and then shut down as SIGTERM
  shuts it down. SIGTERM alone would close the connections it had accepted but not yet read a
  request from, and the client would see a reset.

- **Answer times.** vLLM's engine client is wrapped so each answer can carry its own times
  (:func:`answer_timing.install_engine_probe`).

Run as ``python -m <pkg>.vllm_server <vllm serve flags>``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from typing import Any

from .answer_timing import install_engine_probe

LISTEN_FD_ENV = "SERVING_LISTEN_FD"
RETIRE_SIGNAL = signal.SIGUSR1
RETIRE_WAIT_SECONDS = 10.0
"""Longer than uvicorn's keep-alive timeout (vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s): an idle
keep-alive connection is closed by the server's own timer before the retiring server stops."""


def bind_socket(host: str, port: int) -> socket.socket:
    """The port's socket, bound, not listening: a connection is refused until the first vLLM
    server listens on it (asyncio's create_server calls listen). As vLLM binds its own:
    SO_REUSEADDR, IPv6 for an IPv6 host."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family, type=socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def _use_inherited_socket(fd: int) -> None:
    from vllm.entrypoints.launchers import launcher

    os.set_inheritable(fd, False)  # the engine processes vLLM starts do not carry it

    def create_server_socket(addr: tuple[str, int], *, reuse_port: bool) -> socket.socket:
        return socket.socket(fileno=fd)

    launcher.create_server_socket = create_server_socket


def _make_retirable() -> None:
    from vllm.entrypoints.launchers import launcher

    class RetirableServer(launcher.NoSignalServer):
        """vLLM's uvicorn server with a retire signal (see the module docstring)."""

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(RETIRE_SIGNAL, self.on_retire_signal)

        def on_retire_signal(self) -> None:
            """Once; the task is kept (the loop holds tasks weakly)."""
            if getattr(self, "retiring", None) is None:
                self.retiring = asyncio.get_running_loop().create_task(self.retire())

        async def retire(self) -> None:
            loop = asyncio.get_running_loop()
            for server in self.servers:
                server.close()  # stop accepting: this process's copy of the socket closes
            deadline = loop.time() + RETIRE_WAIT_SECONDS
            while self.server_state.connections and loop.time() < deadline:
                await asyncio.sleep(0.05)
            os.kill(os.getpid(), signal.SIGTERM)  # vLLM's own shutdown from here

    launcher.NoSignalServer = RetirableServer  # type: ignore[misc]  # serve_http builds it


def main(argv: Any = None) -> None:
    fd = os.environ.get(LISTEN_FD_ENV)
    if fd:
        _use_inherited_socket(int(fd))
    _make_retirable()
    install_engine_probe()  # each answer's own times (answer_timing.py)
    from vllm.entrypoints.launchers.api_server.entry import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
