"""One consumer process: a Subscribe stream per assigned topic, each on its own thread.

Each stream thread stamps a DeliveryBatch with the wall clock the moment it arrives
(`time.time_ns()`: the same clock the producers used for deliver times, since every
process runs on this machine), tallies it, then hands its ids to the stream's
`timerwheel.AckSender`, which acks as `timerwheel.Client.consume` does: gathering for
`ack_linger_ms` (the scenario's), another call beside an unanswered one only once that
has been out a whole linger, up to 4 on the wire (timerwheel/acks.py). The sum of the
server's Ack answers is the `acked` figure of the accounting.

The process stops when the harness sets `channels.stop` (or at its hard deadline): the
streams are cancelled, the acks still waiting are sent, and the merged tally goes back
to the harness as plain bytes and encoded HDR histograms.
"""

from __future__ import annotations

import resource
import threading
import time
from collections import Counter
from dataclasses import dataclass

import grpc
import structlog

from timerwheel.acks import DEFAULT_ACK_LINGER_MS, AckSender
from timerwheel.client import TimerClient
from timerwheel.credentials import PLAIN, Connection
from timerwheel.loadtest.accounting import Tally, histogram_of, merge_counts, merge_worst
from timerwheel.loadtest.pacing import use_measuring_switch_interval
from timerwheel.types import RemoteError

log = structlog.get_logger("timerwheel.loadtest")


@dataclass(frozen=True)
class ConsumerPlan:
    index: int
    target: str
    topics: tuple[str, ...]
    max_in_flight: int
    rpc_timeout_s: float
    hard_timeout_s: float  # the longest this process runs after the start
    connection: Connection = PLAIN  # TLS and token for a secured server
    ack_linger_ms: int = DEFAULT_ACK_LINGER_MS


# After a stream error the stream is opened again, first after this long, then twice as
# long each time up to the cap: a server whose worker was killed is back within a few
# seconds (its supervisor restarts it), and a harness that stops waits at most the cap.
RESUBSCRIBE_FIRST_S = 0.1
RESUBSCRIBE_MAX_S = 2.0
# Ack failures that leave the ack's outcome unknown (the worker answering it went away):
# the message is delivered again if the ack was not applied, so they do not fail the run;
# their ids are counted (`ack_unknown`) and loosen the balance by as many.
TRANSIENT_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)


class Stream:
    """One topic's Subscribe stream, read on a thread of its own.

    A stream that ends other than by `stop()` (an error, or the server closing it) is
    opened again with a bounded backoff, keeping its tally and its ack sender: a killed
    server worker takes its streams with it, and the messages they held un-acked are
    delivered again to the new stream. Only a stream still down when the run stops is
    an error."""

    def __init__(self, client: TimerClient, topic: str, plan: ConsumerPlan, on_batch) -> None:
        self.client = client
        self.topic = topic
        self.plan = plan
        self.tally = Tally()
        self.error: str | None = None
        self.resubscribed = 0  # times the stream was opened again after it ended
        self.ack_unknown = 0  # acked ids the server's answers do not count (see _run)
        self._last_failure: str | None = None  # set while it waits to subscribe again
        self._on_batch = on_batch
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # the current subscription against stop()
        self.acks = AckSender(client, topic, plan.ack_linger_ms, on_answer=self.tally.ack_answered)
        self.subscription = client.subscribe(topic, plan.max_in_flight)
        self.thread = threading.Thread(target=self._run, name=f"stream-{topic}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        backoff_s = RESUBSCRIBE_FIRST_S
        try:
            while True:
                failure, before = "the server ended the stream", self.tally.received
                try:
                    self._read(self.subscription)
                except RemoteError as exc:
                    failure = repr(exc)
                if self._stopping.is_set():
                    break
                if self.tally.received > before:  # it was up: start the backoff afresh
                    backoff_s = RESUBSCRIBE_FIRST_S
                self._last_failure = failure
                if self._stopping.wait(backoff_s):
                    break
                backoff_s = min(backoff_s * 2, RESUBSCRIBE_MAX_S)
                with self._lock:
                    if self._stopping.is_set():
                        break
                    self.subscription = self.client.subscribe(self.topic, self.plan.max_in_flight)
                self._last_failure = None
                self.resubscribed += 1
                log.info("consumer_resubscribed", topic=self.topic, after=failure)
        except Exception as exc:  # not the stream's error: the harness's own, fails the run
            self.error = f"consumer stream {self.topic}: {exc!r}"
        finally:
            self.acks.close()  # what waits is sent now
            self.tally.acked = self.acks.acked
            # Failed calls, and ids answered "not acked now": after a killed worker, gRPC
            # retries an Ack whose answer was lost, and the retry finds it acked.
            self.ack_unknown = self.acks.failed_ids + self.acks.answered_ids - self.acks.acked
            error = self.acks.error
            if error is not None and error.code not in TRANSIENT_CODES:
                self.error = self.error or f"ack on {self.topic}: {error!r}"

    def _read(self, subscription) -> None:
        """Tally and ack every batch until the stream ends (cancelled: it returns)."""
        for batch in subscription:
            received_ms = time.time_ns() // 1_000_000
            self.tally.add(batch, received_ms)
            self.acks.ack([delivery.message_id for delivery in batch])
            self._on_batch()

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
            self.subscription.cancel()
        self.thread.join(timeout=self.plan.rpc_timeout_s + 5)
        if self.thread.is_alive():
            self.error = self.error or f"consumer stream {self.topic} did not stop"
        elif self._last_failure is not None:  # down at the stop: it may have missed some
            self.error = self.error or (
                f"consumer stream {self.topic}: still down at the stop: {self._last_failure}"
            )


def merge_tallies(tallies: list[Tally]) -> dict:
    """One process's streams as the result the harness merges (bytes, encoded HDR)."""
    delay, fire, lag, early, ack = Counter(), Counter(), Counter(), Counter(), Counter()
    seen: dict[int, list[bytes]] = {}
    for tally in tallies:
        delay.update(tally.delay_ms)
        fire.update(tally.fire_ms)
        lag.update(tally.lag_ms)
        early.update(tally.early_ms)
        ack.update(tally.ack_ms)
        for producer, counts in tally.seen.items():
            seen.setdefault(producer, []).append(bytes(counts))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "role": "consumer",
        "seen": {producer: merge_counts(parts) for producer, parts in seen.items()},
        "delay_ms": histogram_of(delay).encode(),
        "fire_ms": histogram_of(fire).encode(),
        "lag_ms": histogram_of(lag).encode(),
        "early_ms": histogram_of(early).encode(),
        "ack_ms": histogram_of(ack).encode(),
        "worst_delay_ms": merge_worst(t.worst_delay_ms for t in tallies),
        "worst_fire_ms": merge_worst(t.worst_fire_ms for t in tallies),
        "early": sum(early.values()),
        "received": sum(t.received for t in tallies),
        "redelivered": sum(t.redelivered for t in tallies),
        "foreign": sum(t.foreign for t in tallies),
        "acked": sum(t.acked for t in tallies),
        "last_received_ms": max((t.last_received_ms for t in tallies), default=0),
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }


def consumer_main(plan: ConsumerPlan, channels) -> None:
    """Process entry point: subscribe, say ready, consume until told to stop, report."""
    use_measuring_switch_interval()
    client = TimerClient(
        plan.target, timeout_s=plan.rpc_timeout_s,
        tls=plan.connection.tls, token=plan.connection.token,
    )  # fmt: skip
    streams: list[Stream] = []
    try:
        client.wait_ready(timeout_s=30)
        lock = threading.Lock()
        slot = len(channels.progress) - 1 - plan.index  # consumers count from the end

        def on_batch() -> None:
            with lock:
                channels.progress[slot] = sum(s.tally.first_receipts for s in streams)

        streams.extend(Stream(client, topic, plan, on_batch) for topic in plan.topics)
        channels.results.put(("ready", "consumer", plan.index))
        channels.stop.wait(timeout=plan.hard_timeout_s)
        for stream in streams:
            stream.stop()
        result = merge_tallies([stream.tally for stream in streams])
        result["errors"] = [stream.error for stream in streams if stream.error]
        result["ack_unknown"] = sum(stream.ack_unknown for stream in streams)
        result["resubscribed"] = sum(stream.resubscribed for stream in streams)
        result["index"] = plan.index
        channels.results.put(("result", "consumer", result))
    except Exception as exc:
        for stream in streams:
            stream.subscription.cancel()
        channels.results.put(("error", "consumer", f"consumer {plan.index}: {exc!r}"))
    finally:
        client.close()
