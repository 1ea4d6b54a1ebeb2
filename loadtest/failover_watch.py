"""The failover scenario's watch over the cluster: the fault command, and the partitions'
owners read from every node's Stats (`StatsResponse.cluster`) until they are all owned
again.

One thread per node asks its Stats every `POLL_S` (each call bounded by `STATS_TIMEOUT_S`,
so a stopped node shows as not answering, not as a stuck poller) and keeps every answer
and failure with its time. What the run needs is worked out afterwards from that record
(`Ownership`), at each answer's time: the latest answer of each node, its holder (name
and incarnation) and its view of every partition's owner and epoch.

"Lease taken" (all of them) is the first moment after the fault command started at which
every node has answered or failed a Stats call made since, and each partition is seen,
by some node still answering, held by a holder that is answering too: the faulted node's
leases have expired and others hold them. (A node learns of a lease it takes first;
another node's view may lag a renewal behind, so no agreement of every view is waited
for.) The partitions whose owner or epoch then differs from just before the fault are
the moved ones; each one's own takeover is when a node still answering first saw it held
by another answering holder.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from timerwheel.client import TimerClient
from timerwheel.credentials import PLAIN, Connection
from timerwheel.types import RemoteError

POLL_S = 0.2
STATS_TIMEOUT_S = 1.0
FAULT_TIMEOUT_S = 30.0  # the user's fault command is stopped after this long
OUTPUT_CHARS = 400  # of the command's output, kept for the report


@dataclass(frozen=True)
class View:
    """One Stats answer (or failure: `holder` None) of one node, at `at_ms` (wall clock),
    to a call made at `asked_ms` (0: at `at_ms`)."""

    target: str
    at_ms: int
    holder: str | None
    partitions: int = 0
    owners: tuple[tuple[str, int], ...] = ()  # by partition: (owner holder, epoch)
    asked_ms: int = 0

    @property
    def asked(self) -> int:
        return self.asked_ms or self.at_ms


@dataclass
class Fault:
    command: str
    at_ms: int = 0  # when it was started (wall clock ms)
    done_ms: int = 0  # when it returned (or was stopped)
    exit_status: int | None = None  # None: stopped after FAULT_TIMEOUT_S
    output: str = ""

    def run(self) -> None:
        """Run the user's command in a shell, bounded in time (its process group is
        killed at the bound, so a command that hangs does not hold the run)."""
        self.at_ms = now_ms()
        process = subprocess.Popen(
            self.command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip
        try:
            out, _ = process.communicate(timeout=FAULT_TIMEOUT_S)
            self.exit_status = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, _ = process.communicate(timeout=10)
        except BaseException:  # Ctrl-C or SIGTERM meanwhile: leave nothing of it running
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
            raise
        self.done_ms = now_ms()
        self.output = (out or "").strip()[-OUTPUT_CHARS:]

    def as_dict(self) -> dict:
        return {
            "command": self.command, "at_ms": self.at_ms, "took_ms": self.done_ms - self.at_ms,
            "exit_status": self.exit_status, "output": self.output,
        }  # fmt: skip


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Watch:
    """Stats pollers, one thread per target, until `stop()`."""

    targets: tuple[str, ...]
    connection: Connection = PLAIN
    views: list[View] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Watch:
        for target in self.targets:
            thread = threading.Thread(target=self._poll, args=(target,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _poll(self, target: str) -> None:
        tls, token = self.connection.tls, self.connection.token
        with TimerClient(target, timeout_s=STATS_TIMEOUT_S, tls=tls, token=token) as client:
            while not self._stop.is_set():
                asked_ms = now_ms()
                try:
                    view = read_view(target, client.stats())
                except (RemoteError, NotClustered):  # down, or restarted as something else
                    view = View(target, now_ms(), None)
                view = dataclasses.replace(view, asked_ms=asked_ms)
                with self._lock:
                    self.views.append(view)
                self._stop.wait(POLL_S)

    def snapshot(self) -> list[View]:
        with self._lock:
            return list(self.views)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(STATS_TIMEOUT_S + 5)


def read_view(target: str, stats) -> View:
    cluster = stats.cluster
    if not cluster.node:
        raise NotClustered(f"{target} is not a cluster node (its Stats has no cluster)")
    owners = {p.partition: (p.owner, p.epoch) for p in cluster.map}
    table = tuple(owners.get(p, ("", 0)) for p in range(cluster.partitions))
    return View(target, now_ms(), cluster.holder, cluster.partitions, table)


class NotClustered(RuntimeError):
    """A --target that answers but is not a `serve --cluster` node."""


@dataclass
class Ownership:
    """What the views say about the failover (see the module docstring)."""

    baseline: dict[int, tuple[str, int]]  # just before the fault
    taken_ms: int | None  # every partition owned again by an answering node
    moved: list[int]  # partitions with another owner or epoch then
    holder_of: dict[str, str]  # target -> its holder (latest answer)
    # partition -> when an answering node first saw it held by another answering holder
    retaken_ms: dict[int, int] = field(default_factory=dict)


def ownership(views: list[View], fault: Fault) -> Ownership:
    views = sorted(views, key=lambda v: v.at_ms)
    latest: dict[str, View] = {}
    baseline: dict[int, tuple[str, int]] = {}
    holder_of: dict[str, str] = {}
    taken_ms, moved, retaken = None, [], {}
    targets = {v.target for v in views}
    for view in views:
        latest[view.target] = view
        if view.holder is not None:
            holder_of[view.target] = view.holder
        if view.at_ms < fault.at_ms:
            if view.holder is not None:
                baseline = dict(enumerate(view.owners))
            continue
        if taken_ms is not None:
            continue
        since = {t: v for t, v in latest.items() if v.asked >= fault.at_ms}
        if set(since) != targets:
            continue  # a node not heard from (answer or failure) since the fault
        answering = [v for v in since.values() if v.holder is not None]
        live = {v.holder for v in answering}
        if view.holder is not None:
            for p, (owner, epoch) in enumerate(view.owners):
                if owner in live and baseline.get(p) != (owner, epoch):
                    retaken.setdefault(p, view.at_ms)
        held = {}  # partition -> (owner, epoch) as a node that answers sees it held
        for v in answering:
            for p, (owner, epoch) in enumerate(v.owners):
                if owner in live and held.get(p, baseline.get(p)) == baseline.get(p):
                    held[p] = (owner, epoch)
        if answering and len(held) == max(v.partitions for v in answering):
            now_moved = sorted(p for p in held if baseline.get(p) != held[p])
            # Nothing moved: final only once the command is over (a kill may not have
            # landed yet when a node answered); a command that lasts (a SIGSTOP, then a
            # SIGCONT) has its partitions taken while it runs.
            if now_moved or view.at_ms >= fault.done_ms:
                taken_ms, moved = view.at_ms, now_moved
    return Ownership(baseline, taken_ms, moved, holder_of, retaken)


def check_nodes(targets: tuple[str, ...], connection: Connection = PLAIN) -> int:
    """Before the run: every target answers Stats as a cluster node, and every partition's
    owner is one of them (a stream per node reaches no other node's deliveries). Returns
    the cluster's partition count."""
    holders, owners, partitions = set(), set(), 0
    for target in targets:
        tls, token = connection.tls, connection.token
        with TimerClient(target, timeout_s=10, tls=tls, token=token) as client:
            try:
                view = read_view(target, client.stats())
            except RemoteError as error:
                raise ConnectionError(f"--target {target}: Stats failed: {error}") from None
        holders.add(view.holder)
        partitions = view.partitions
        owners.update(owner for owner, _ in view.owners if owner)
    others = sorted(owners - holders)
    if others:
        raise NotClustered(
            f"--target: partitions are owned by {', '.join(others)}, not among the targets: "
            "list every node of the cluster"
        )
    return partitions
