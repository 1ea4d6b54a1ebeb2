"""timerwheel.procs.engine_host: the engine's calls over a real unix socket to a real engine
(RocksDB in a temp dir, the writer thread running), the way a worker process makes them: sends
carried
several requests to a call, each request answered alone (`submit_sends_many`)."""

from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from timerwheel.common import State
from timerwheel.engine.engine import Engine
from timerwheel.engine.ids import MessageIds
from timerwheel.engine.prepare import prepare_sends
from timerwheel.engine.system_clock import SystemClock
from timerwheel.procs.engine_host import EngineHost
from timerwheel.procs.ipc import CallClient, CallServer, unpack_error
from timerwheel.procs.remote_engine import RemoteEngine
from timerwheel.wheels.domain import AlreadyExists, SendOptions, SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings

IN_AN_HOUR = When(WhenKind.DELAY, 3_600_000)


@pytest.fixture
def hosted(tmp_path: Path):
    """(the engine, a client of its host over a unix socket, the settings)."""
    settings = Settings(data_dir=str(tmp_path / "data"))
    engine = Engine(settings, SystemClock())
    host = EngineHost(engine)
    authkey = secrets.token_bytes(32)
    path = str(tmp_path / "engine.sock")
    server = CallServer(path, authkey, host.handle, "engine")
    calls = CallClient(path, authkey, "engine")
    try:
        yield engine, calls, settings
    finally:
        calls.close()
        server.close()
        host.close()
        engine.close()


def spec(message_id: str = "", body: bytes = b"x") -> SendSpec:
    return SendSpec("t", body, IN_AN_HOUR, message_id=message_id)


def test_submit_sends_many_answers_each_op_alone(hosted):
    engine, calls, settings = hosted
    ids, now_ms = MessageIds(), engine.now_ms()
    engine.send(spec("taken", b"first"))
    ops = [
        prepare_sends([spec("a1"), spec("a2")], now_ms, settings, ids),  # a SendBatch
        prepare_sends([spec("taken", b"other")], now_ms, settings, ids),  # refused
        prepare_sends([spec()], now_ms, settings, ids),  # a server-made id
    ]
    batch, refused, unary = calls.call("submit_sends_many", ops)

    ok, results = batch
    assert ok and [r.message_id for r in results] == ["a1", "a2"]
    ok, packed = refused
    assert not ok
    error = unpack_error(packed)
    assert isinstance(error, AlreadyExists) and "taken" in str(error)
    ok, packed = unary
    assert ok and packed is None  # server-made ids: the worker makes the results itself
    [result] = ops[2].unpacked_results(packed)
    assert result.message_id == ops[2].message_ids[0]
    assert engine.get("a1").body == b"x"
    assert engine.get("a2").body == b"x"
    assert engine.get(result.message_id).topic == "t"
    assert engine.get("taken").body == b"first"  # the refused op changed nothing


def test_server_made_ids_cross_without_their_specs_and_are_stored_whole(hosted):
    """An op of server-made ids reaches the engine without its SendSpecs (timerwheel.engine.send_op,
    `SendOp.__getstate__`): the due-at-once and the scheduled send are each stored with
    their topic, body and options."""
    engine, calls, settings = hosted
    specs = [
        SendSpec("due", b"now", When(WhenKind.DELAY, 0)),
        SendSpec("later", b"in an hour", IN_AN_HOUR, {"k": "v"}),
        SendSpec("kept", b"retried", IN_AN_HOUR, options=SendOptions(max_attempts=3)),
    ]
    op = prepare_sends(specs, engine.now_ms(), settings, MessageIds())
    [(ok, packed)] = calls.call("submit_sends_many", [op])

    results = op.unpacked_results(packed)
    assert ok and [r.message_id for r in results] == op.message_ids
    due, later, kept = (engine.get(r.message_id) for r in results)
    assert (due.topic, due.body, due.state) == ("due", b"now", State.FIRED)
    assert (later.topic, later.body, later.state) == ("later", b"in an hour", State.SCHEDULED)
    assert later.properties == {"k": "v"}
    assert engine.max_attempts(kept.message_id) == 3


def test_anything_but_send_ops_is_refused_before_any_is_queued(hosted):
    engine, calls, settings = hosted
    good = prepare_sends([spec("good")], engine.now_ms(), settings, MessageIds())
    with pytest.raises(Exception, match="takes SendOps, not dict"):
        calls.call("submit_sends_many", [good, {"message_ids": ["x"]}])
    assert engine.count("t", 0, 0)[0] == 0


def test_concurrent_sends_of_a_remote_engine_are_stored_and_answered_each_alone(hosted):
    """Twenty threads of a worker send at once: every send is stored under the id it was
    answered with, and the one whose id is taken fails without failing any other."""
    engine, calls, settings = hosted
    engine.send(spec("taken", b"first"))
    remote = RemoteEngine(settings, calls, SystemClock())
    specs = [spec(f"m{i}") for i in range(19)] + [spec("taken", b"other")]

    def send(one: SendSpec):
        return remote.send_batch_async([one]).result()

    with ThreadPoolExecutor(max_workers=len(specs)) as pool:
        futures = [pool.submit(send, one) for one in specs]
    with pytest.raises(AlreadyExists):
        futures[-1].result()
    for i, future in enumerate(futures[:-1]):
        [result] = future.result()
        assert result.message_id == f"m{i}"
        assert engine.get(f"m{i}").body == b"x"
    assert engine.get("taken").body == b"first"


def test_a_remote_engines_server_made_ids_are_answered_with_what_was_stored(hosted):
    """The engine answers them with None (`SendOp.packed_results`); the worker's results,
    made from what it prepared, name each stored timer with its stored time."""
    engine, calls, settings = hosted
    remote = RemoteEngine(settings, calls, SystemClock())

    results = remote.send_batch_async([spec(body=b"one"), spec(body=b"two")]).result()

    assert len({r.message_id for r in results}) == 2
    for result, body in zip(results, (b"one", b"two"), strict=True):
        stored = engine.get(result.message_id)
        assert (stored.body, stored.deliver_at_ms) == (body, result.deliver_at_ms)
        assert not result.existed
