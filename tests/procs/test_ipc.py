"""timerwheel.procs.ipc: calls between processes over a unix socket, tested with a real socket (the
server side on a thread of this process, which the channel cannot tell apart)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from timerwheel.procs.ipc import CallClient, CallContext, CallServer, PeerUnavailable, RemoteFailure
from timerwheel.wheels.domain import InvalidArgument, NotFound

KEY = b"k" * 32


class Recorder:
    def __init__(self) -> None:
        self.closed = threading.Event()
        self.release = threading.Event()
        self.entered = threading.Event()

    def handle(self, method: str, args: tuple, context: CallContext) -> object:
        if method == "echo":
            return args
        if method == "bad_field":
            raise InvalidArgument("messages[2].topic", "a b", "has a space")
        if method == "missing":
            raise NotFound("message_id='x': no such timer")
        if method == "bug":
            raise KeyError("oops")
        if method == "watch":
            context.on_close(self.closed.set)
            return "watching"
        if method == "block":
            self.entered.set()
            self.release.wait(10)
            return "released"
        raise AttributeError(method)


@pytest.fixture
def served(tmp_path: Path):
    recorder = Recorder()
    path = str(tmp_path / "s.sock")
    server = CallServer(path, KEY, recorder.handle, "test")
    client = CallClient(path, KEY, "test")
    try:
        yield recorder, client, path
    finally:
        recorder.release.set()
        client.close()
        server.close()


def test_a_call_returns_the_value_and_domain_errors_cross_with_their_fields(served):
    _, client, _ = served
    assert client.call("echo", 1, b"x", ["y"]) == (1, b"x", ["y"])
    with pytest.raises(InvalidArgument) as caught:
        client.call("bad_field")
    assert caught.value.field == "messages[2].topic"
    assert str(caught.value) == "messages[2].topic='a b': has a space"
    with pytest.raises(NotFound, match="no such timer"):
        client.call("missing")
    with pytest.raises(RemoteFailure, match="bug: KeyError"):
        client.call("bug")
    assert client.call("echo", "still usable") == ("still usable",)


def test_concurrent_calls_each_have_a_connection(served):
    recorder, client, _ = served
    blocked = threading.Thread(target=client.call, args=("block",))
    blocked.start()
    # A call from another thread is answered while the first one is still blocked.
    assert client.call("echo", "other") == ("other",)
    recorder.release.set()
    blocked.join(10)
    assert not blocked.is_alive()


def test_closing_the_client_runs_the_server_side_close_callbacks(served):
    recorder, client, _ = served
    assert client.call("watch") == "watching"
    client.close()
    assert recorder.closed.wait(10)


def test_a_missing_peer_or_a_wrong_key_is_peer_unavailable(served, tmp_path):
    _, _, path = served
    with pytest.raises(PeerUnavailable):
        CallClient(str(tmp_path / "nobody.sock"), KEY, "nobody").call("echo")
    with pytest.raises(PeerUnavailable):
        CallClient(path, b"w" * 32, "test").call("echo")


def test_a_call_in_progress_when_the_server_closes_sees_peer_unavailable(tmp_path):
    recorder = Recorder()
    path = str(tmp_path / "s.sock")
    server = CallServer(path, KEY, recorder.handle, "test")
    client = CallClient(path, KEY, "test")
    errors: list[Exception] = []

    def call() -> None:
        try:
            client.call("block")
        except Exception as exc:
            errors.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    assert recorder.entered.wait(10)  # the call is in the handler
    server.close()
    recorder.release.set()
    thread.join(10)
    client.close()
    assert len(errors) == 1 and isinstance(errors[0], PeerUnavailable), errors


def test_a_call_begun_is_answered_later_and_its_connection_carries_the_next(served):
    recorder, client, _ = served
    blocked = client.begin("block")
    assert recorder.entered.wait(10)
    # Begun calls hold their connections: another call meanwhile gets one of its own.
    other = client.begin("echo", "other")
    assert other.result() == ("other",)
    recorder.release.set()
    assert blocked.result() == "released"
    assert client.call("echo", "next") == ("next",)  # no answer left unread on either
    with pytest.raises(InvalidArgument, match="has a space"):
        client.begin("bad_field").result()
