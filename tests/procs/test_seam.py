"""The typed process seam: `EngineApi` and `DeliveryApi` (engine/api.py, delivery/api.py)
implemented explicitly by the in-process and the remote variants, and an allow-list of
the calls that cross (procs/engine_host.py REMOTE_CALLS), with nothing forwarded by name.

What is held here:
1. Every member of each protocol is defined by both of its implementations' own classes
   (not inherited from the protocol's `...` body, not reached through `__getattr__`).
2. Every call a `RemoteEngine` makes, over every method of `EngineApi`, is one the engine
   process answers; and every name that process answers is a method of `Engine`.
3. The engine process refuses any other name: lifecycle, stepping, private attributes,
   and the send entry points that would validate and encode in the engine's process.
"""

from __future__ import annotations

import contextlib
import inspect
import secrets
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from timerwheel.delivery.api import DeliveryApi
from timerwheel.delivery.hub import DeliveryHub
from timerwheel.engine.api import EngineApi, FiredSource, TimerApi
from timerwheel.engine.engine import Engine
from timerwheel.engine.system_clock import SystemClock
from timerwheel.procs.engine_host import REMOTE_CALLS, EngineHost
from timerwheel.procs.ipc import CallClient, CallServer, RemoteFailure
from timerwheel.procs.remote_engine import RemoteEngine
from timerwheel.procs.remote_hub import RemoteHub
from timerwheel.wheels.bulk import TimerFilter
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings

# Calls a RemoteEngine makes that are not EngineApi methods of the same name: the funnel of
# prepared sends, and the long poll behind add_fired_listener.
PLUMBING = {"submit_sends_many", "wait_fired"}


def protocol_members(protocol: type) -> set[str]:
    """The methods and attributes a protocol declares, its bases' included."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass in (object,) or klass.__name__ in ("Protocol", "Generic"):
            continue
        names |= {n for n in vars(klass) if not n.startswith("_")}
        names |= set(getattr(klass, "__annotations__", {}))
    return names


def defined_by(implementation: type, name: str) -> bool:
    """True when `name` is defined by the implementation's own code: a class in its MRO
    that is not one of the protocols, or an attribute its __init__ sets."""
    for klass in implementation.__mro__:
        if klass in (EngineApi, TimerApi, FiredSource, DeliveryApi, object):
            continue
        if name in vars(klass):
            return True
    init = inspect.getsource(implementation.__init__)
    return f"self.{name} =" in init


@pytest.mark.parametrize("implementation", [Engine, RemoteEngine])
def test_each_engine_implements_every_member_of_the_engine_api_itself(implementation):
    missing = sorted(n for n in protocol_members(EngineApi) if not defined_by(implementation, n))
    assert missing == []
    assert "__getattr__" not in vars(implementation)


@pytest.mark.parametrize("implementation", [DeliveryHub, RemoteHub])
def test_each_hub_implements_every_member_of_the_delivery_api_itself(implementation):
    missing = sorted(n for n in protocol_members(DeliveryApi) if not defined_by(implementation, n))
    assert missing == []
    assert "__getattr__" not in vars(implementation)


class RecordingCalls(CallClient):
    """A CallClient that answers nothing: it records the method names asked for."""

    def __init__(self) -> None:  # no socket
        self.methods: list[str] = []

    def call(self, method: str, *args: object) -> Any:
        self.methods.append(method)
        if method == "submit_sends_many":  # each op answered: stored, server-made ids
            [ops] = args
            return [(True, None) for _ in ops]
        return {"fetch_fired_raw": [], "ready_topics": [], "wait_fired": set()}.get(method)

    def close(self) -> None:
        pass


def arguments_for(method: Any) -> list[object]:
    """Plausible positional arguments for a method of EngineApi, by parameter name."""
    samples = {
        "message_id": "m", "message_ids": ["m"], "topic": "t", "when": When(WhenKind.DELAY, 1),
        "include_trace": False, "from_ms": 0, "to_ms": 0, "limit": 1, "page_token": "",
        "include_body": True, "out_dir": "/nonexistent", "max_rows_per_file": 0,
        "reserve_bytes": 0, "after_seq": 0, "max_bytes": 0, "first_deliveries": None,
        "attempts": 1, "reason": "", "groups": [], "specs": [], "listener": lambda topics: None,
        "timer_filter": TimerFilter(topic="t"), "dlq_topic": "t.dlq", "series_id": "s",
        "paused": True,
    }  # fmt: skip
    parameters = list(inspect.signature(method).parameters.values())
    return [samples[p.name] for p in parameters if p.default is inspect.Parameter.empty]


def test_every_call_a_remote_engine_makes_is_one_the_engine_process_answers(tmp_path):
    calls = RecordingCalls()
    remote = RemoteEngine(Settings(data_dir=str(tmp_path)), calls, SystemClock())
    for name in sorted(protocol_members(EngineApi) - {"settings", "close"}):
        method = getattr(remote, name)
        result = method(*arguments_for(method))
        if name == "send_batch_async":
            assert isinstance(result, Future)
    remote.close()
    made = set(calls.methods)
    assert made - PLUMBING <= REMOTE_CALLS, made - PLUMBING - REMOTE_CALLS
    # Each EngineApi method crossed (all but those answered in this process).
    local = {"send_batch_async", "local_now_ms", "add_fired_listener"}
    expected = protocol_members(EngineApi) - {"settings", "close"} - local
    expected = (expected - {"fetch_deliveries"}) | {"fetch_fired_raw"}
    assert expected <= made, expected - made


def test_every_name_the_engine_process_answers_is_a_method_of_the_engine():
    for name in REMOTE_CALLS:
        assert callable(getattr(Engine, name, None)), name
    assert not any(name.startswith("_") for name in REMOTE_CALLS)


@contextlib.contextmanager
def _served_engine(directory: Path):
    """An engine answering over a real unix socket, as the engine process does."""
    engine = Engine(Settings(data_dir=str(directory / "data")), SystemClock())
    host = EngineHost(engine)
    authkey = secrets.token_bytes(32)
    path = str(directory / "engine.sock")
    server = CallServer(path, authkey, host.handle, "engine")
    calls = CallClient(path, authkey, "engine")
    try:
        yield engine, calls
    finally:
        calls.close()
        server.close()
        host.close()
        engine.close()


@pytest.fixture
def engine_process(tmp_path: Path):
    with _served_engine(tmp_path) as served:
        yield served


@pytest.fixture(scope="module")
def refusing_engine_process(tmp_path_factory):
    """One served engine for every refusal below: a refused call changes nothing (each
    test asserts the writer still runs), so each starts from the same state."""
    with _served_engine(tmp_path_factory.mktemp("refusing")) as served:
        yield served


@pytest.mark.parametrize(
    "name",
    ["close", "step", "run_until_idle", "send", "send_batch", "send_batch_async",
     "submit_sends", "max_attempts", "health", "store", "_store", "__class__", "settings"],
)  # fmt: skip
def test_the_engine_process_refuses_every_name_off_the_list(refusing_engine_process, name):
    engine, calls = refusing_engine_process
    with pytest.raises(RemoteFailure, match="not callable remotely"):
        calls.call(name)
    assert engine.writer_running()  # "close" did not close it


def test_a_remote_engine_is_served_by_a_real_engine_process(engine_process, tmp_path):
    """Sends prepared in the caller's process, then every kind of read, across the socket."""
    engine, calls = engine_process
    remote = RemoteEngine(engine.settings, calls, SystemClock())
    spec = SendSpec("t", b"body", When(WhenKind.DELAY, 3_600_000), message_id="m1")
    [result] = remote.send_batch_async([spec]).result()
    assert result.message_id == "m1"
    assert remote.get("m1").body == b"body"
    assert remote.topic_of("m1") == "t"
    assert remote.count("t") == (1, 0, 0)
    assert [t.message_id for t in remote.list_pending("t", 0, 2**62, 10)[0]] == ["m1"]
    assert remote.delivery_options_of(["m1"]) == {"m1": (None, None)}  # none of its own
    assert remote.topics() == [("t", 1, 0)]
