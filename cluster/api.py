"""The engine's API in cluster mode: each call routed by its ids' partition to this node's
engine, and each change appended to the partition's log before it is answered
(docs/cluster.md, "What a node does now"; decision 0008).

    gRPC front ──TimerApi──> ClusterApi ──(an owned partition)──> Engine, then Appender(p)
                                 │
                                 └──(another node's)──> NotOwner (server/forwarding.py
                                                        forwards such calls before this)

`ClusterApi` implements `TimerApi` explicitly, method by method; ownership, leases and the
log are `ClusterNode`'s (timerwheel.cluster.node).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from timerwheel.cluster import journal
from timerwheel.cluster.errors import NoOwner
from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.partitions import with_partition
from timerwheel.common import SendResult, State
from timerwheel.engine.ids import MessageIds
from timerwheel.wheels.bulk import BulkResult, RedriveResult, TimerFilter
from timerwheel.wheels.domain import FailedPrecondition, SendSpec, Timer, When
from timerwheel.wheels.lateness import LatenessMinute
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.validation import validate_message_ref, validate_sends

if TYPE_CHECKING:
    from timerwheel.engine.api import TimerApi
    from timerwheel.engine.series import SeriesPause
    from timerwheel.store.export import ExportSummary


class ClusterApi:
    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.engine = node.engine
        self.settings: Settings = node.engine.settings
        self._ids = MessageIds()
        self._round_robin = itertools.count()

    def now_ms(self) -> int:
        return self.engine.now_ms()

    def check_sends(self, specs: list[SendSpec]) -> list[int]:
        """Validate a batch as a whole (InvalidArgument naming `messages[i]`): each send's
        deliver time. A batch split by owner is checked here before any part is sent
        (server.forwarding)."""
        return validate_sends(specs, self.engine.now_ms(), self.settings)

    def send_batch_async(self, specs: Iterable[SendSpec]) -> Future:
        specs = list(specs)
        if any(spec.options is not None and spec.options.repeat is not None for spec in specs):
            self._require_series_readers()
        deliver_times = self.check_sends(specs)
        owned = self.node.owned()
        named: list[SendSpec] = []
        partitions: list[int] = []
        made = [i for i, spec in enumerate(specs) if not spec.message_id]
        home = owned[next(self._round_robin) % len(owned)] if owned else None
        new_ids = self._ids.take([deliver_times[i] for i in made]) if made else []
        made_ids = dict(zip(made, new_ids, strict=True))
        for index, spec in enumerate(specs):
            if spec.message_id:
                partition = self.node.partition_of(spec.message_id)
            else:
                if home is None:
                    raise NoOwner("this node owns no partition at the moment; retry")
                partition = home
                spec = spec._replace(message_id=with_partition(made_ids[index], home))
            named.append(spec)
            partitions.append(partition)
        for partition in sorted(set(partitions)):
            self.node.require_owner(partition)
        result: Future = Future()
        stored = self.engine.send_batch_async(named)

        def stored_done(done: Future) -> None:
            try:
                results: list[SendResult] = done.result()
                by_partition: dict[int, list[journal.Entry]] = {}
                series: list[str] = []
                for spec, partition, sent in zip(named, partitions, results, strict=True):
                    if sent.existed:
                        continue
                    if spec.options is not None and spec.options.repeat is not None:
                        series.append(sent.message_id)  # logged as the engine stored it
                        continue
                    entry = journal.sent_of(spec, sent.message_id, sent.deliver_at_ms)
                    by_partition.setdefault(partition, []).append(entry)
                logged = [self.node.journal(p, entries) for p, entries in by_partition.items()]
                logged += self._series_records(series)
            except BaseException as error:
                result.set_exception(error)
                return
            _when_all(logged, result, results)

        stored.add_done_callback(stored_done)
        return result

    def _require_series_readers(self) -> None:
        """A recurring series is logged in version-2 records, which a node of an older
        build refuses: while one is live (a rolling upgrade not finished) a series is
        refused rather than written where such a node may have to read it back."""
        needed = journal.KIND_VERSION["series"]
        older = self.node.placement.older_nodes(needed)
        if older:
            raise FailedPrecondition(
                f"options.repeat: a recurring series needs every node at log version "
                f"{needed}; {', '.join(older)} still run an older build: finish the rolling "
                f"upgrade first (docs/cluster.md, 'Upgrading a cluster')"
            )

    def _series_records(self, series_ids: Iterable[str]) -> list[Future]:
        """The records of these series' last changes not yet in the log (the node logs
        each change the engine makes to a series: timerwheel.cluster.series_log)."""
        found = (self.node.series_logged(series_id) for series_id in series_ids)
        return [future for future in found if future is not None]

    def cancel(self, message_id: str) -> State:
        validate_message_ref(message_id)
        partition = self.node.partition_of(message_id)
        self.node.require_owner(partition)
        state = self.engine.cancel(message_id)
        self.node.wait_logged([self.node.journal(partition, [journal.Cancelled((message_id,))])])
        return state

    def reschedule(self, message_id: str, when: When) -> int:
        validate_message_ref(message_id)
        partition = self.node.partition_of(message_id)
        self.node.require_owner(partition)
        deliver_at_ms = self.engine.reschedule(message_id, when)
        entry = journal.Rescheduled(message_id, deliver_at_ms)
        logged = [self.node.journal(partition, [entry]), *self._series_records([message_id])]
        self.node.wait_logged(logged)
        return deliver_at_ms

    def get(self, message_id: str, include_trace: bool = False) -> Timer:
        validate_message_ref(message_id)
        self.node.require_owner(self.node.partition_of(message_id))
        return self.engine.get(message_id, include_trace)

    def topic_of(self, message_id: str) -> str | None:
        """The id's topic if this node owns its partition; None otherwise (the request
        guard then leaves the topic check to the owner the call is forwarded to)."""
        if not self.node.owns(self.node.partition_of(message_id)):
            return None
        return self.engine.topic_of(message_id)

    def bulk_cancel(
        self, timer_filter: TimerFilter, limit: int = 0, page_token: str = "",
        purge: bool = False,
    ) -> BulkResult:  # fmt: skip
        """This node's partitions only (server.bulk_scatter asks every node): applied to
        the engine, then every timer it cancelled or purged logged as cancelled, in its
        partition's log, before the answer."""
        result = self.engine.bulk_cancel(timer_filter, limit, page_token, purge)
        changed = [*result.cancelled_ids, *(i for ids in result.fired.values() for i in ids)]
        by_partition: dict[int, list[str]] = {}
        for message_id in changed:
            by_partition.setdefault(self.node.partition_of(message_id), []).append(message_id)
        self.node.wait_logged(
            self.node.journal(partition, [journal.Cancelled(tuple(ids))])
            for partition, ids in sorted(by_partition.items())
        )  # fmt: skip
        return result

    def redrive(
        self, dlq_topic: str, timer_filter: TimerFilter, limit: int = 0, page_token: str = ""
    ) -> RedriveResult:
        """This node's partitions only (server.bulk_scatter asks every node). Nothing to
        log: the log never holds a dead-letter move (a takeover fires a dead letter again
        on the topic it came from, where a redrive puts it)."""
        return self.engine.redrive(dlq_topic, timer_filter, limit, page_token)

    def pause_series(self, series_id: str, paused: bool) -> SeriesPause:
        validate_message_ref(series_id, "series_id")
        self.node.require_owner(self.node.partition_of(series_id))
        done = self.engine.pause_series(series_id, paused)
        self.node.wait_logged(self._series_records([series_id]))
        return done

    def list_pending(
        self, topic: str, from_ms: int, to_ms: int, limit: int, page_token: str = "",
        include_body: bool = True,
    ) -> tuple[list[Timer], str]:  # fmt: skip
        return self.engine.list_pending(topic, from_ms, to_ms, limit, page_token, include_body)

    def count(self, topic: str, from_ms: int = 0, to_ms: int = 0) -> tuple[int, int, int]:
        return self.engine.count(topic, from_ms, to_ms)

    def stats(self) -> dict[str, Any]:
        stats = dict(self.engine.stats())
        stats["cluster"] = self.node.cluster_map()
        return stats

    def topics(self) -> list[tuple[str, int, int]]:
        return self.engine.topics()

    def fire_lateness(self) -> list[LatenessMinute]:
        return self.engine.fire_lateness()

    def export(
        self, out_dir: str, max_rows_per_file: int = 0, reserve_bytes: int = 0
    ) -> ExportSummary:
        return self.engine.export(out_dir, max_rows_per_file, reserve_bytes)


def _when_all(futures: list[Future], result: Future, value: object) -> None:
    """Complete `result` with `value` once every future is done, or with the first error."""
    if not futures:
        result.set_result(value)
        return
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(done: Future) -> None:
        error = done.exception()
        with lock:
            remaining[0] -= 1
            if result.done():
                return
            if error is not None:
                result.set_exception(error)
            elif remaining[0] == 0:
                result.set_result(value)

    for future in futures:
        future.add_done_callback(one_done)


def _is_a_timer_api(api: ClusterApi) -> TimerApi:
    return api  # the type checker holds ClusterApi to TimerApi, method by method
