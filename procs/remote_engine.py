"""The engine's API in a process that is not the engine's (a gRPC worker, the delivery
process): sends are prepared here, everything else is a call to the engine process.

`send_batch_async` validates, chooses ids and encodes records in this process (the same
`prepare_sends` the in-process engine runs in its callers' threads) and hands the engine
a ready-to-write `SendOp`, together with the ops of other threads sending at the same
time (`timerwheel.procs.send_funnel`: one call carries them all, each answered alone). Any other
public engine method is forwarded by name (`timerwheel.procs.engine_host.EngineHost.handle` decides
what may be called), so an engine method added later is usable remotely without a change here.
`add_fired_listener` becomes a thread that long-polls the engine's `wait_fired`; after the
engine process restarts it reports every topic with fired messages, since the new
engine's fire sequences are unknown here.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future

import structlog
from timerwheel.engine.ids import MessageIds
from timerwheel.engine.prepare import prepare_sends
from timerwheel.procs.ipc import CallClient, PeerUnavailable
from timerwheel.procs.send_funnel import SendFunnel
from timerwheel.store import records
from timerwheel.wheels.clock import Clock
from timerwheel.wheels.domain import SendSpec
from timerwheel.wheels.settings import Settings

log = structlog.get_logger("timerwheel.remote_engine")

FIRED_POLL_S = 1.0  # how long one wait_fired call may wait for a fire
RECONNECT_WAIT_S = 0.2  # between attempts while the engine process is unreachable


class RemoteEngine:
    def __init__(self, settings: Settings, calls: CallClient, clock: Clock) -> None:
        self.settings = settings
        self._calls = calls
        self._clock = clock
        self._ids = MessageIds()
        self._sends = SendFunnel(functools.partial(calls.call, "submit_sends_many"))
        self._closed = threading.Event()
        self._listeners: list[threading.Thread] = []

    def send_batch_async(self, specs: Iterable[SendSpec]) -> Future:
        """Prepared here, stored by the engine process; the future is already complete."""
        op = prepare_sends(list(specs), self._clock.now_ms(), self.settings, self._ids)
        future: Future = Future()
        future.set_result(self._sends.submit(op))
        return future

    def fetch_deliveries(
        self, topic: str, after_seq: int, limit: int, max_bytes: int = 0
    ) -> list[records.FiredRecord]:
        """Read from the engine process, undecoded: the delivery process hands each record
        on to the workers, which decode it into a Delivery."""
        rows = self._calls.call("fetch_fired_raw", topic, after_seq, limit, max_bytes)
        return records.fired_records(rows)

    def add_fired_listener(self, listener: Callable[[set[str]], None]) -> None:
        thread = threading.Thread(
            target=self._poll_fired, args=(listener,), name="fired-poll", daemon=True
        )
        self._listeners.append(thread)
        thread.start()

    def _poll_fired(self, listener: Callable[[set[str]], None]) -> None:
        connected = True
        while not self._closed.is_set():
            try:
                if not connected:  # the engine may have restarted: everything is dirty
                    listener(set(self._calls.call("ready_topics")))
                    connected = True
                topics = self._calls.call("wait_fired", FIRED_POLL_S)
            except PeerUnavailable:
                connected = False
                self._closed.wait(RECONNECT_WAIT_S)
                continue
            if topics:
                listener(topics)

    def close(self) -> None:
        self._closed.set()
        self._calls.close()
        for thread in self._listeners:
            thread.join(timeout=FIRED_POLL_S + 1)

    def local_now_ms(self) -> int:
        """The service's time as this process reads it: its wall clock, no call (the
        delivery hub's time for a delivery it holds: timerwheel.delivery.first_deliveries)."""
        return self._clock.now_ms()

    def __getattr__(self, name: str) -> Callable[..., object]:
        if name.startswith("_"):
            raise AttributeError(name)
        return functools.partial(self._calls.call, name)
