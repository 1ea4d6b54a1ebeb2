"""TimerAdmin: operator endpoints (Stats, Topics, Export, BulkCancel, Purge, Redrive,
InFlight and Consumers: server/admin_views.py), proto
<-> engine translation only.

Export writes only below the server's export root (timerwheel.store.export_root): switched off
(FAILED_PRECONDITION) when none is configured, one at a time, and only with room to spare.
"""

from __future__ import annotations

import bisect
import contextlib
from typing import Any

import grpc
import psutil

from timerwheel.delivery.api import DeliveryApi
from timerwheel.engine.api import TimerApi
from timerwheel.security.settings import SecuritySettings
from timerwheel.server import admin_views
from timerwheel.server.errors import rpc_errors
from timerwheel.store import keys
from timerwheel.store.export import ExportError, OutputRefused
from timerwheel.store.export_root import OUTSIDE_ROOT, dir_bytes, resolve_in_root, without_root
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc
from timerwheel.wheels.bulk import TimerFilter
from timerwheel.wheels.domain import FailedPrecondition, InvalidArgument
from timerwheel.wheels.lateness import LatenessMinute

# Topics in one Topics answer: by default, and at most (a TopicBacklog is a few tens of
# bytes, so the largest page stays well under a megabyte).
TOPICS_LIMIT_DEFAULT = 1_000
TOPICS_LIMIT_MAX = 10_000


def server_processes(root_pid: int | None) -> list[psutil.Process]:
    """The server's processes, so Stats reports the whole server's CPU and RSS: this one
    when the server runs in one process (`root_pid` None), else the supervisor `root_pid`
    and all its descendants (engine, delivery and worker processes)."""
    if root_pid is None:
        return [psutil.Process()]
    try:
        root = psutil.Process(root_pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return [psutil.Process()]


def _cpu_and_rss(processes: list[psutil.Process]) -> tuple[float, int]:
    cpu_s, rss = 0.0, 0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = process.cpu_times()
            cpu_s += times.user + times.system
            rss += process.memory_info().rss
    return cpu_s, rss


def _lateness(minute: LatenessMinute) -> pb.LatenessMinute:
    return pb.LatenessMinute(
        minute_ms=minute.minute_ms, fires=minute.fires, p50_ms=minute.p50_ms,
        p99_ms=minute.p99_ms, max_ms=minute.max_ms,
    )  # fmt: skip


def timer_filter(message: pb.TimerFilter) -> TimerFilter:
    return TimerFilter(
        topic=message.topic, series_id=message.series_id, id_prefix=message.id_prefix,
        from_ms=message.from_ms, to_ms=message.to_ms,
    )  # fmt: skip


def topics_limit(limit: int) -> int:
    """The topics one Topics answer holds: `limit`, or the default for 0. A bound, so a
    server with hundreds of thousands of topics answers in pages, not in one reply of
    megabytes that the server builds and the client buffers whole."""
    if limit < 0 or limit > TOPICS_LIMIT_MAX:
        raise InvalidArgument("limit", limit, f"must be 0..{TOPICS_LIMIT_MAX:,} (0: default)")
    return limit or TOPICS_LIMIT_DEFAULT


class TimerAdmin(pb_grpc.TimerAdminServicer):
    def __init__(
        self, engine: TimerApi, hub: DeliveryApi[Any], security: SecuritySettings,
        root_pid: int | None = None,
    ) -> None:  # fmt: skip
        self._engine = engine
        self._hub = hub
        self._security = security
        self._root_pid = root_pid

    def Stats(self, request: pb.StatsRequest, context: grpc.ServicerContext) -> pb.StatsResponse:
        with rpc_errors(context, "Stats"):
            stats = self._engine.stats()
            cpu_s, rss = _cpu_and_rss(server_processes(self._root_pid))
            return pb.StatsResponse(
                now_ms=stats["now_ms"],
                queued_ops=stats["queued_ops"],
                unacked=self._hub.unacked(),
                column_family_keys={
                    family: stats[f"keys_{family}"] for family in keys.ALL_COLUMN_FAMILIES
                },
                rss_bytes=rss,
                cpu_seconds=cpu_s,
                data_dir_bytes=dir_bytes(self._engine.settings.data_dir),
                fire_lateness=[_lateness(m) for m in self._engine.fire_lateness()],
                clock_steps_forward=stats["clock_steps_forward"],
                clock_steps_backward=stats["clock_steps_backward"],
                last_clock_step_ms=stats["last_clock_step_ms"],
                last_clock_step_at_ms=stats["last_clock_step_at_ms"],
                thread_cpu_seconds=stats["thread_cpu_s"],
                cluster=_cluster(stats.get("cluster")),
                sends_total=stats.get("sends_total", 0),
                fires_total=stats.get("fires_total", 0),
                acks_total=stats.get("acks_total", 0),
            )

    def Topics(self, request: pb.TopicsRequest, context: grpc.ServicerContext) -> pb.TopicsResponse:
        with rpc_errors(context, "Topics"):
            limit = topics_limit(request.limit)
            every = self._engine.topics()  # by name
            start = bisect.bisect_right(every, request.page_token, key=lambda row: row[0])
            page = every[start : start + limit]
            more = start + limit < len(every)
            return pb.TopicsResponse(
                topics=[
                    pb.TopicBacklog(topic=topic, pending=pending, fired_unacked=unacked)
                    for topic, pending, unacked in page
                ],
                next_page_token=page[-1][0] if more else "",
                total=len(every),
            )

    def BulkCancel(self, request: pb.BulkRequest, context: grpc.ServicerContext) -> pb.BulkResponse:
        with rpc_errors(context, "BulkCancel"):
            return self._bulk(request, purge=False)

    def Purge(self, request: pb.BulkRequest, context: grpc.ServicerContext) -> pb.BulkResponse:
        with rpc_errors(context, "Purge"):
            return self._bulk(request, purge=True)

    def _bulk(self, request: pb.BulkRequest, purge: bool) -> pb.BulkResponse:
        result = self._engine.bulk_cancel(
            timer_filter(request.filter), request.limit, request.page_token, purge
        )
        for topic, ids in result.fired.items():  # purged: delivery stops tracking them
            self._forget(topic, ids)
        return pb.BulkResponse(
            cancelled=result.cancelled, purged=result.purged,
            next_page_token=result.next_token, more=bool(result.next_token),
        )  # fmt: skip

    def Redrive(
        self, request: pb.RedriveRequest, context: grpc.ServicerContext
    ) -> pb.RedriveResponse:
        with rpc_errors(context, "Redrive"):
            result = self._engine.redrive(
                request.dead_letter_topic, timer_filter(request.filter), request.limit,
                request.page_token,
            )  # fmt: skip
            self._forget(request.dead_letter_topic, result.moved)
            return pb.RedriveResponse(
                moved=len(result.moved), next_page_token=result.next_token,
                more=bool(result.next_token),
            )  # fmt: skip

    def InFlight(
        self, request: pb.InFlightRequest, context: grpc.ServicerContext
    ) -> pb.InFlightResponse:
        with rpc_errors(context, "InFlight"):
            return admin_views.in_flight(self._engine, self._hub, request)

    def Consumers(
        self, request: pb.ConsumersRequest, context: grpc.ServicerContext
    ) -> pb.ConsumersResponse:
        with rpc_errors(context, "Consumers"):
            return admin_views.consumers(self._engine, self._hub, request)

    def _forget(self, topic: str, message_ids: list[str]) -> None:
        """Messages that left `topic` by a purge or a redrive: a subscriber that holds
        them in flight is answered as for an Ack (the engine acks none of them: they are
        no longer FIRED there), so none is delivered on `topic` again."""
        step = self._engine.settings.max_ack_ids
        for start in range(0, len(message_ids), step):
            self._hub.ack(topic, message_ids[start : start + step])

    def Export(self, request: pb.ExportRequest, context: grpc.ServicerContext) -> pb.ExportResponse:
        with rpc_errors(context, "Export"):
            root = self._security.export_root
            if not root:
                raise FailedPrecondition(
                    "Export is switched off on this server: start it with --export-root DIR "
                    "(exports are then written only below DIR), or export a stopped "
                    "server's store with `timerwheel export --data-dir`"
                )
            if request.max_rows_per_file < 0:
                raise InvalidArgument(
                    "max_rows_per_file", request.max_rows_per_file, "must be >= 0 (0: default)"
                )
            out_dir = resolve_in_root(root, request.out_dir)
            reserve = self._security.export_reserve_bytes
            try:  # one at a time and the space check: the engine's (it may be remote)
                summary = self._engine.export(out_dir, request.max_rows_per_file, reserve)
            except (OutputRefused, OSError) as exc:  # a file, not empty, no permission
                # The words of every out_dir refusal: what exists below the root stays
                # unsaid (and with it the root's path).
                raise InvalidArgument("out_dir", request.out_dir, OUTSIDE_ROOT) from exc
            except ExportError as exc:  # e.g. the disk filled meanwhile
                raise ExportError(without_root(str(exc), root)) from exc
            return pb.ExportResponse(
                out_dir=summary.out_dir,
                rows=summary.rows,
                files=summary.files,
                cut_at_ms=summary.cut_at_ms,
                seconds=summary.seconds,
                timers=summary.timers,
                bytes=summary.bytes,
            )


def _cluster(cluster: dict | None) -> pb.ClusterStats | None:
    """A cluster node's section of the stats (timerwheel.cluster.node.cluster_map)."""
    if cluster is None:
        return None
    partitions = [pb.ClusterPartition(**row) for row in cluster["map"]]
    fields = {k: v for k, v in cluster.items() if k != "map"}
    return pb.ClusterStats(map=partitions, **fields)
