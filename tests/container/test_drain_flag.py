"""The drain flag the request path reads agrees with /ping from the moment the state file says
draining: no cache window in which /ping answers 503 and /invocations still answers 200."""

from __future__ import annotations

from container.serving.hooks import _DrainFlag
from container.serving.state import State, write_state


def test_flag_follows_the_state_file_on_the_next_request(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "state.json"
    flag = _DrainFlag(str(path))
    assert flag() is False  # no file yet: not draining
    write_state(path, State.READY)
    assert flag() is False
    write_state(path, State.DRAINING)
    assert flag() is True  # the very next call, no period to wait out
    write_state(path, State.READY)
    assert flag() is False


def test_an_unreadable_state_file_is_not_draining(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "state.json"
    path.write_text("{not json")
    assert _DrainFlag(str(path))() is False
