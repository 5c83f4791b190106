"""The entrypoint owns the port's socket (``Supervisor.bind``): a clear startup error when the
port is taken, a short retry while a killed server's processes still hold it, and a socket that
refuses connections until a vLLM server listens on it. The servers' use of it (hand-over, retire)
is tested on the real engine in test_engine_death."""

from __future__ import annotations

import socket
import threading

import pytest

from container.serving import settings
from container.serving.entrypoint import StartupError, Supervisor


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def supervisor(port: int) -> Supervisor:
    return Supervisor(settings.load({"VLLM_HOST": "127.0.0.1", "VLLM_PORT": str(port)}))


def listener(port: int) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def test_port_in_use_is_a_startup_error_naming_the_address() -> None:
    port = free_port()
    with listener(port):
        sup = supervisor(port)
        with pytest.raises(StartupError) as err:
            sup.bind(wait=0.3)
    assert f"cannot bind 127.0.0.1:{port}" in str(err.value)
    assert "Address already in use" in str(err.value)
    assert sup.sock is None


def test_bind_waits_for_a_port_released_within_the_wait() -> None:
    port = free_port()
    held = listener(port)
    releasing = threading.Event()

    def release() -> None:
        releasing.set()  # before the close: a bind that succeeds finds it set
        held.close()

    threading.Timer(0.5, release).start()
    sup = supervisor(port)
    sup.bind(wait=60)  # the wait bounds the retry; the holder lets go well within it
    assert releasing.is_set()  # it waited for the port, and took it once free
    assert sup.sock is not None and sup.sock.getsockname() == ("127.0.0.1", port)
    sup.release()


def test_bound_socket_refuses_until_a_server_listens_then_rebind_replaces_it() -> None:
    port = free_port()
    sup = supervisor(port)
    sup.bind()
    assert sup.sock is not None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    # A vLLM server listens on the same socket through its inherited descriptor.
    served = socket.socket(fileno=sup.sock.dup().detach())
    served.listen()
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        conn, _ = served.accept()
        conn.close()
    served.close()  # the server exits; the entrypoint's copy keeps the socket listening
    first = sup.sock
    sup.bind()  # after a vLLM exit: a fresh socket, not listening, the old one closed
    assert first.fileno() == -1 and sup.sock is not first
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    sup.release()
    assert sup.sock.fileno() == -1
