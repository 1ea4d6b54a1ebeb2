"""One load-test run, start to end: server, processes, phases, accounting, figures.

Phases:
 1. server: spawn `timerwheel serve` on a temp dir (or dial `--target`), wait until ready;
 2. workers: start the consumer and producer processes ("spawn": no gRPC state is ever
    forked) and wait until each has connected (consumers: subscribed) and said so;
 3. send: fix a common start time a little ahead, release everyone, and wait for every
    producer's result (their schedules end at start + send phase; bounded);
 4. deliver: wait until the latest deliver time plus `grace_ms` has passed AND every
    stored, uncancelled timer was received - or `drain_timeout_ms` after the latest
    deliver time, whichever is first (for backlog: only the grace);
 5. stop: tell the consumers to stop, collect their tallies, stop the sampler and the
    server (always, in `finally`), then account.

Every wait is bounded; a worker that dies or errs aborts the run and fails it. Processes
left running after their deadline are terminated in `finally`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import os
import queue
import secrets
import sys
import time
from collections.abc import Iterator, Sequence

import grpc
import structlog
from tqdm import tqdm

from timerwheel.client import TimerClient
from timerwheel.credentials import PLAIN, Connection
from timerwheel.loadtest.accounting import account, merge_counts
from timerwheel.loadtest.consumer import ConsumerPlan, consumer_main
from timerwheel.loadtest.figures import figures
from timerwheel.loadtest.pacing import split_messages
from timerwheel.loadtest.producer import ProducerPlan, producer_main
from timerwheel.loadtest.scenarios import Scenario
from timerwheel.loadtest.server_proc import SpawnedServer, StatsSampler, stats_reader
from timerwheel.procs.lifecycle import run_as_child_of
from timerwheel.types import RemoteError

log = structlog.get_logger("timerwheel.loadtest")

CONNECT_TIMEOUT_S = 15.0
READY_TIMEOUT_S = 90.0
START_LEAD_NS = 500_000_000  # the common start lies this far ahead of the release
TICK_S = 0.25  # progress refresh; every wait below is bounded by a deadline


@dataclasses.dataclass
class Channels:
    """What the harness shares with its worker processes."""

    go: object  # Event: the start time is set, go
    abort: object  # Event: stop sending now
    stop: object  # Event: consumers, stop
    start: object  # Array('q', 2): monotonic start ns, wall start ms
    progress: object  # Array('q', producers + consumers): sent / first receipts
    results: object  # Queue of ("ready" | "result" | "error", role, payload)


def run(
    scenario: Scenario,
    *,
    target: str | None = None,
    serve_flags: Sequence[str] = (),
    keep_data: bool = False,
    progress: bool = True,
    connection: Connection = PLAIN,
) -> dict:
    """Run `scenario` and return its figures (see timerwheel.loadtest.figures); never raises on a
    failed accounting (that is in the figures' `problems`), only on a harness failure.

    `connection` (TLS, token) is how every process dials a secured `target`; the token
    needs role admin, since the harness sends, consumes and reads Stats."""
    load_before = os.getloadavg()
    with _server(target, serve_flags, keep_data) as (address, spawned):
        client = TimerClient(
            address, timeout_s=scenario.rpc_timeout_s,
            tls=connection.tls, token=connection.token,
        )  # fmt: skip
        try:
            _connect(client, address)
            outcome = Run(scenario, address, progress, connection).execute(client, spawned)
        finally:
            client.close()
        outcome["kept_dir"] = str(spawned.work_dir) if spawned and keep_data else None
    return figures(scenario, outcome, load_before, os.getloadavg(), target or "spawned")


def _connect(client: TimerClient, address: str) -> None:
    try:
        client.wait_ready(timeout_s=CONNECT_TIMEOUT_S)
    except grpc.FutureTimeoutError:
        raise ConnectionError(
            f"no timerwheel server answers at {address} within {CONNECT_TIMEOUT_S:g} s"
        ) from None


@contextlib.contextmanager
def _server(
    target: str | None, serve_flags: Sequence[str], keep: bool
) -> Iterator[tuple[str, SpawnedServer | None]]:
    if target is not None:
        yield target, None
        return
    with SpawnedServer(serve_flags, keep=keep) as spawned:
        yield spawned.target, spawned


class Run:
    def __init__(
        self, scenario: Scenario, target: str, show_progress: bool, connection: Connection
    ) -> None:
        self.scenario = scenario
        self.target = target
        self.connection = connection
        self.show_progress = show_progress
        self.ctx = mp.get_context("spawn")
        producers, consumers = scenario.producers, scenario.consumers
        self.channels = Channels(
            go=self.ctx.Event(), abort=self.ctx.Event(), stop=self.ctx.Event(),
            start=self.ctx.Array("q", 2, lock=False),
            progress=self.ctx.Array("q", producers + consumers, lock=False),
            results=self.ctx.Queue(),
        )  # fmt: skip
        self.run_id = secrets.token_hex(4)
        self.topics = tuple(f"lt-{self.run_id}-{i}" for i in range(scenario.topics))
        self.processes: list = []
        self.producer_results: list[dict] = []
        self.consumer_results: list[dict] = []
        self.errors: list[str] = []
        self.failed = {"producer": 0, "consumer": 0}  # workers that reported an error
        self.marks: dict[str, float] = {}  # phase -> monotonic seconds
        self.shortfall = ""  # set when producers could not keep the offered rate

    # -- the phases -------------------------------------------------------------------------
    def execute(self, client: TimerClient, spawned: SpawnedServer | None) -> dict:
        sampler = StatsSampler(stats_reader(client), join_timeout_s=client.timeout_s or 30).start()
        try:
            self._start_workers()
            self._release()
            self._send_phase()
            self._deliver_phase()
        finally:
            self.channels.abort.set()
            self.channels.go.set()  # a producer still waiting for the start sees the abort
            self.channels.stop.set()
            self._collect("producer", self.scenario.producers, self.scenario.rpc_timeout_s + 30)
            self._collect("consumer", self.scenario.consumers, timeout_s=60)
            self._reap()
            self.marks["end"] = time.monotonic()
            sampler.sample()
            vmhwm = spawned.peak_rss_bytes() if spawned else 0
            sampler.stop()
            # What the server still holds in the run's topics is late, not lost.
            held = self._server_held(client)
        return self._outcome(sampler, vmhwm, held)

    def _server_held(self, client: TimerClient) -> int | None:
        """Messages the server still holds in the run's own topics once the consumers
        stopped: still scheduled (Count of each topic) or fired and un-acked (Topics).
        The topics carry the run's id, so this holds for a server shared with others
        (`--target`) as for a spawned one."""
        mine, prefix = set(self.topics), f"lt-{self.run_id}-"
        try:
            scheduled = sum(client.count(topic).pending for topic in self.topics)
            unacked, token = 0, prefix  # Topics by name, from the run's prefix on
            while token:
                page = client.topics_page(page_token=token)
                unacked += sum(t.fired_unacked for t in page.topics if t.topic in mine)
                past = not page.topics or not page.topics[-1].topic.startswith(prefix)
                token = "" if past else page.next_page_token
        except RemoteError:  # no count, no claim: the missing stay lost
            return None
        return scheduled + unacked

    def _start_workers(self) -> None:
        scenario = self.scenario
        hard_timeout_s = (
            (
                scenario.send_phase_ms
                + scenario.send_overrun_ms
                + scenario.latest_delay_ms
                + scenario.drain_timeout_ms
            )
            / 1000
            + READY_TIMEOUT_S
            + 60
        )
        for index in range(scenario.consumers):
            plan = ConsumerPlan(
                index, self.target, self._topics_of(index), scenario.max_in_flight,
                scenario.rpc_timeout_s, hard_timeout_s, self.connection, scenario.ack_linger_ms,
            )  # fmt: skip
            self._spawn(consumer_main, plan, f"lt-consumer-{index}")
        for index in range(scenario.producers):
            self._spawn(producer_main, self._producer_plan(index), f"lt-producer-{index}")
        self._await_ready(scenario.producers + scenario.consumers)

    def _topics_of(self, consumer: int) -> tuple[str, ...]:
        """Topics round-robin over consumers; more consumers than topics share them."""
        count = self.scenario.consumers
        mine = tuple(t for i, t in enumerate(self.topics) if i % count == consumer)
        return mine or (self.topics[consumer % len(self.topics)],)

    def _producer_plan(self, index: int) -> ProducerPlan:
        s = self.scenario
        return ProducerPlan(
            index=index, producers=s.producers, target=self.target,
            messages=split_messages(s.messages, s.producers, index), rate=s.rate,
            batch=s.batch, topics=self.topics, body_bytes=s.body_bytes,
            delay_ms=s.scaled_delay_ms, burst_offset_ms=s.burst_offset_ms,
            burst_window_ms=s.burst_window_ms, cancel_share=s.cancel_share,
            max_outstanding=s.max_outstanding, rpc_timeout_s=s.rpc_timeout_s,
            seed=int(self.run_id, 16) + index, connection=self.connection,
            threads=s.producer_threads, connections=s.connections,
        )  # fmt: skip

    def _spawn(self, main, plan, name: str) -> None:
        # It dies with the harness: a SIGKILLed harness cannot stop it.
        args = (os.getpid(), main, plan, self.channels)
        process = self.ctx.Process(target=run_as_child_of, args=args, name=name)
        process.start()
        self.processes.append(process)

    def _await_ready(self, count: int) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        ready = 0
        while ready < count:
            kind, role, payload = self._next_message(deadline, f"{count - ready} not ready")
            if kind == "ready":
                ready += 1
            else:
                raise RuntimeError(f"{role} failed before the start: {payload}")

    def _release(self) -> None:
        start_ns = time.monotonic_ns() + START_LEAD_NS
        self.channels.start[0] = start_ns
        self.channels.start[1] = (time.time_ns() + START_LEAD_NS) // 1_000_000
        self.marks["start"] = start_ns / 1e9
        self.channels.go.set()

    def _send_phase(self) -> None:
        scenario = self.scenario
        # From the common start (the producers' schedule), not from the release before it.
        deadline = self.marks["start"] + (scenario.send_phase_ms + scenario.send_overrun_ms) / 1000
        with self._bar("send", scenario.messages) as bar:
            while len(self.producer_results) + self.failed["producer"] < scenario.producers:
                self._tick(bar, sum(self.channels.progress[: scenario.producers]))
                if time.monotonic() > deadline:
                    # Not an error that ends the run: what was stored is still delivered
                    # and accounted; the shortfall fails the run at the end (_outcome).
                    self.shortfall = (
                        "send phase: producers could not keep the offered rate and were "
                        "stopped at the end of the send phase (see 'offered rate reached')"
                    )
                    self.channels.abort.set()
                    # Stopped producers still report what they sent: wait for that.
                    self._collect("producer", scenario.producers, scenario.rpc_timeout_s + 30)
                    break
                self._take_message(time.monotonic() + TICK_S)
            self._tick(bar, sum(self.channels.progress[: scenario.producers]))
        self.marks["sent"] = time.monotonic()

    def _deliver_phase(self) -> None:
        scenario = self.scenario
        latest_ms = max((r["max_deliver_ms"] for r in self.producer_results), default=0)
        expected = sum(r["states"].count(1) for r in self.producer_results)  # SENT
        settle_ms = latest_ms + scenario.grace_ms
        give_up_ms = latest_ms + max(scenario.drain_timeout_ms, scenario.grace_ms)
        if not scenario.expect_delivery:
            expected, give_up_ms = 0, time.time_ns() // 1_000_000 + scenario.grace_ms
            settle_ms = give_up_ms
        with self._bar("deliver", expected) as bar:
            while True:
                received = sum(self.channels.progress[scenario.producers :])
                self._tick(bar, received)
                now_ms = time.time_ns() // 1_000_000
                if now_ms >= give_up_ms or (now_ms >= settle_ms and received >= expected):
                    break
                if self.errors:  # a worker failed: the run fails, stop waiting
                    break
                self._take_message(time.monotonic() + TICK_S)
        self.marks["delivered"] = time.monotonic()

    # -- messages from the workers ----------------------------------------------------------
    def _next_message(self, deadline: float, waiting_for: str) -> tuple[str, str, object]:
        while True:
            try:
                return self.channels.results.get(timeout=min(TICK_S, deadline - time.monotonic()))
            except (queue.Empty, ValueError):
                dead = [p.name for p in self.processes if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"worker process(es) died: {', '.join(dead)}") from None
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"timed out: {waiting_for}") from None

    def _take_message(self, until: float) -> None:
        """Handle at most one worker message, waiting until `until` for it."""
        try:
            kind, role, payload = self.channels.results.get(
                timeout=max(until - time.monotonic(), 0.001)
            )
        except queue.Empty:
            return
        self._handle(kind, role, payload)

    def _handle(self, kind: str, role: str, payload) -> None:
        if kind == "error":
            self.failed[role] += 1
            self.errors.append(str(payload))
            self.channels.abort.set()
        elif kind == "result" and role == "producer":
            self.producer_results.append(payload)
        elif kind == "result":
            self.consumer_results.append(payload)
            self.errors.extend(payload.get("errors", []))

    def _collect(self, role: str, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        have = self.consumer_results if role == "consumer" else self.producer_results
        while len(have) + self.failed[role] < count:
            try:
                kind, who, payload = self._next_message(deadline, f"{role} results")
            except (TimeoutError, RuntimeError) as exc:
                self.errors.append(str(exc))
                return
            self._handle(kind, who, payload)

    def _reap(self) -> None:
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                self.errors.append(f"{process.name} did not exit; terminated")
                process.terminate()
                process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join(timeout=10)

    # -- progress ---------------------------------------------------------------------------
    def _bar(self, phase: str, total: int):
        return tqdm(
            total=total, desc=f"{self.scenario.name}: {phase}", unit="msg", unit_scale=True,
            file=sys.stderr, disable=not self.show_progress, dynamic_ncols=True,
        )  # fmt: skip

    @staticmethod
    def _tick(bar, value: int) -> None:
        bar.n = value
        bar.refresh()

    # -- the outcome --------------------------------------------------------------------------
    def _shortfall_fails(self) -> bool:
        """Producers behind at the end fail a run, but an overload run's (expected there)."""
        return bool(self.shortfall) and not self.scenario.fire_p999_target_ms

    def _outcome(self, sampler: StatsSampler, vmhwm_bytes: int, held: int | None) -> dict:
        states = {r["index"]: r["states"] for r in self.producer_results}
        seen_parts: dict[int, list[bytes]] = {}
        for result in self.consumer_results:
            for producer, counts in result["seen"].items():
                seen_parts.setdefault(producer, []).append(counts)
        accounting = account(
            states,
            {p: merge_counts(parts) for p, parts in seen_parts.items()},
            acked=sum(r["acked"] for r in self.consumer_results),
            early=sum(r["early"] for r in self.consumer_results),
            expect_delivery=self.scenario.expect_delivery,
            errors=self.errors + ([self.shortfall] if self._shortfall_fails() else []),
            ack_unknown=sum(r.get("ack_unknown", 0) for r in self.consumer_results),
        )
        if held is not None:
            accounting.count_server_held(held)
        return {
            "accounting": accounting,
            "producers": self.producer_results,
            "consumers": self.consumer_results,
            "sampler": sampler,
            "vmhwm_bytes": vmhwm_bytes,
            "marks": self.marks,
        }
