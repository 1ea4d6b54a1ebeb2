"""Model-based test of partition ownership (cluster/lease.py, cluster/fencing.py): several
nodes with their own monotonic clocks, the in-memory lease store expiring keys on its own
clock, and each partition's stream as the in-memory log that checks appends as JetStream
does (`Nats-Expected-Last-Subject-Sequence` on the epoch subject).

The world: real time advances in steps; each node's clock and the store's clock advance by
the step times the clock's rate, within 1 ± RHO (the drift bound the lease terms are built
for). Rates belong to the clocks, so a fast store and a slow holder stay so over a whole
lease (the case the margin is for) until a rule redraws them; every example starts with
each clock at the edge of the bound. A node can be paused (SIGSTOP: it takes no step,
while its monotonic clock, the kernel's, runs on), resumed, crashed (its views are gone),
restarted (a new incarnation, a clock with another origin), stopped gracefully (it
releases its leases). Its store calls may be slow (sent, then time passes, then applied),
lose their answer (applied, never answered) or be lost (never applied); its watch on a
key may wake it to read at once.

Properties, checked after every step:
1. At any instant at most one node's own verdict, on its own clock, is OWN for a partition
   (paused nodes included: their clocks run).
2. Epochs strictly increase with each new owner: every epoch a node wins is above every
   epoch won before for that partition, and the markers in each log have non-decreasing
   epochs, an epoch written again only by its own holder (a partition taken anew under the
   same lease: `marker_step` writes a new marker rather than adopt its earlier one).
3. Fencing: an append under a marker is refused exactly when a later marker has been
   written (the pure `append_allowed` rule); so a deposed owner's append with an old epoch
   is refused, so is a slow append of an earlier takeover under the same lease (its
   marker no longer the last), and an append by a node whose verdict is OWN under its
   current marker is never refused.
4. Liveness: from any state with a node running, if the running nodes watch the key and
   tick every step, a running node owns each partition within ttl + renew interval,
   stretched by the drift bound (plus one step).

The terms use the least margin the drift allows, so property 1 is tested at its edge: with
a margin a tenth below it (or a verdict that ignores the deadline) the model finds two
owners; closer than that, the whole-ms steps are too coarse to land in the gap.
"""

from __future__ import annotations

import itertools
import math

from helpers.budget import examples
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from timerwheel.cluster.fencing import EpochMarker, MarkerStep, MemoryPartitionLog, marker_step
from timerwheel.cluster.lease import (
    PPM,
    LeaseTerms,
    LeaseView,
    MemoryLeaseStore,
    Renew,
    Verdict,
    call,
    run,
)

NODES = 3
PARTITIONS = 2
RHO_PPM = 10_000  # clocks may run 1 % fast or slow
# Real time steps in whole ms; the clocks count microseconds (the lease code is unit-free:
# its `_ms` names are the deployment's unit), so a step times a rate of whole thousands of
# ppm is exact: no rounding for a violation to hide behind.
US = 1_000
TTL = 4_000 * US
# The tightest margin the drift allows: the model must hold at the edge, not with room.
TERMS = LeaseTerms(
    ttl_ms=TTL, renew_every_ms=1_000 * US, margin_ms=LeaseTerms.least_margin_ms(TTL, RHO_PPM),
    max_drift_ppm=RHO_PPM,
)  # fmt: skip
RATES = (PPM - RHO_PPM, PPM, PPM + RHO_PPM)
DRILL_STEP_MS = 10
LIVENESS_MS = (
    math.ceil((TERMS.ttl_ms + TERMS.renew_every_ms) / US * PPM / (PPM - RHO_PPM)) + DRILL_STEP_MS
)

steps = st.one_of(st.integers(1, 100), st.integers(100, 2_500))
rates = st.lists(st.sampled_from(RATES), min_size=NODES + 1, max_size=NODES + 1)  # + store
node_ids = st.integers(0, NODES - 1)
partition_ids = st.integers(0, PARTITIONS - 1)


class Node:
    def __init__(self, index: int, clock_ms: int) -> None:
        self.index = index
        self.incarnation = 0
        self.clock_ms = clock_ms
        self.paused = False
        self.down = False  # crashed or stopped
        self.views = self._fresh_views()
        self.markers_used: list[list[int]] = [[] for _ in range(PARTITIONS)]  # a takeover's

    @property
    def holder(self) -> str:
        return f"node{self.index}/{self.incarnation}"

    def _fresh_views(self) -> list[LeaseView]:
        return [
            LeaseView(partition, self.holder, TERMS, address=f"10.0.0.{self.index}:7070")
            for partition in range(PARTITIONS)
        ]

    def restart(self, clock_ms: int) -> None:
        self.incarnation += 1
        self.down = self.paused = False
        self.clock_ms = clock_ms  # a new process, maybe a rebooted machine: any origin
        self.views = self._fresh_views()
        self.markers_used = [[] for _ in range(PARTITIONS)]  # the old process's died with it

    @property
    def running(self) -> bool:
        return not self.down and not self.paused

    def verdict(self, partition: int) -> Verdict:
        return Verdict.STANDBY if self.down else self.views[partition].verdict(self.clock_ms)


class OwnershipModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.real_ms = 0
        self.store = MemoryLeaseStore(ttl_ms=TERMS.ttl_ms, now_ms=5_000_000 * US)
        self.nodes = [Node(index, clock_ms=1_000 * US * (index + 1)) for index in range(NODES)]
        self.logs = [MemoryPartitionLog() for _ in range(PARTITIONS)]
        self.epochs_won: list[list[int]] = [[] for _ in range(PARTITIONS)]
        self.rates = [PPM] * (NODES + 1)  # the nodes' clocks, then the store's

    @initialize(
        clock_rates=st.lists(st.sampled_from(RATES[::2]), min_size=NODES + 1, max_size=NODES + 1)
    )
    def clocks_at_the_bound(self, clock_rates: list[int]) -> None:
        """Every clock starts at the edge of the bound, fast or slow: the margin is for a
        slow holder beside a fast store."""
        self.rates = clock_rates

    # -- the world -----------------------------------------------------------------------
    def _advance(self, step_ms: int) -> None:
        self.real_ms += step_ms
        for node, rate in zip(self.nodes, self.rates, strict=False):
            node.clock_ms += step_ms * rate // US  # exact: rates are whole thousands of ppm
        self.store.now_ms += step_ms * self.rates[-1] // US
        self._check_one_owner()

    def _set_view(self, node: Node, partition: int, view: LeaseView) -> None:
        before = node.views[partition].held
        after = view.held
        if after is not None and (before is None or before.epoch != after.epoch):
            won = self.epochs_won[partition]
            if after.epoch not in won:  # adopting its own lost create is not a new win
                assert not won or after.epoch > max(won), (after.epoch, won)
                won.append(after.epoch)
        node.views[partition] = view

    def _fence(self, node: Node, partition: int) -> None:
        """What a node that won a lease does next: find the epoch subject's last marker,
        then write its own, adopt it, or give the lease up."""
        view = node.views[partition]
        if not view.needs_marker() or view.verdict(node.clock_ms) is Verdict.STOP:
            return
        assert view.held is not None
        log = self.logs[partition]
        last_sequence, last = log.last_marker()
        step = marker_step(view.held.epoch, node.holder, last)
        if step is MarkerStep.DEPOSED:
            self._set_view(node, partition, view.deposed())
        else:
            marker = EpochMarker(view.held.epoch, node.holder, view.address)
            written = log.write_marker(marker, last_sequence)
            if written is not None:
                node.markers_used[partition].append(written)
                self._set_view(node, partition, view.fenced(written))

    def _tick(self, node: Node) -> None:
        for partition in range(PARTITIONS):
            self._set_view(node, partition, run(node.views[partition], self.store, node.clock_ms))
            self._fence(node, partition)
        self._check_one_owner()

    def _owners(self, partition: int) -> list[Node]:
        return [node for node in self.nodes if node.verdict(partition) is Verdict.OWN]

    def _check_one_owner(self) -> None:
        for partition in range(PARTITIONS):
            owners = self._owners(partition)
            assert len(owners) <= 1, (
                f"p{partition}: {[node.holder for node in owners]} all OWN at {self.real_ms} ms"
            )

    # -- rules ---------------------------------------------------------------------------
    @rule(clock_rates=rates)
    def clocks_drift(self, clock_rates: list[int]) -> None:
        self.rates = clock_rates

    @rule(step_ms=steps)
    def time_passes(self, step_ms: int) -> None:
        self._advance(step_ms)

    @rule(index=node_ids)
    def tick(self, index: int) -> None:
        if self.nodes[index].running:
            self._tick(self.nodes[index])

    @rule(step_ms=steps)
    def everyone_ticks(self, step_ms: int) -> None:
        self._advance(step_ms)
        for node in self.nodes:
            if node.running:
                self._tick(node)

    @rule(index=node_ids, partition=partition_ids, delay_ms=steps)
    def slow_call(self, index: int, partition: int, delay_ms: int) -> None:
        """Sent now, applied and answered `delay_ms` later (the node keeps its send time)."""
        node = self.nodes[index]
        if not node.running:
            return
        request = node.views[partition].plan(node.clock_ms)
        self._advance(delay_ms)
        if request is not None and node.running:
            answer = call(self.store, request)
            self._set_view(node, partition, node.views[partition].answered(request, answer))
            self._check_one_owner()

    @rule(index=node_ids, partition=partition_ids, applied=st.booleans())
    def unanswered_call(self, index: int, partition: int, applied: bool) -> None:
        """A call that times out: the store applied it (answer lost) or never saw it."""
        node = self.nodes[index]
        request = node.views[partition].plan(node.clock_ms) if node.running else None
        if request is None:
            return
        if applied:
            call(self.store, request)
        self._set_view(node, partition, node.views[partition].unanswered(request))
        self._check_one_owner()

    @rule(index=node_ids, partition=partition_ids)
    def renewal_answer_lost(self, index: int, partition: int) -> None:
        """A renewal the store applied but whose answer was lost, then the node's tick: its
        next renewal is refused (the revision moved on), it reads its own lease back, same
        epoch, and takes the partition anew (cluster/node.py gives it up first). Then the
        earlier takeover's appender, still retrying a publish, sends it."""
        node = self.nodes[index]
        view = node.views[partition]
        request = view.plan(node.clock_ms) if node.running else None
        if not isinstance(request, Renew):
            return
        call(self.store, request)
        self._set_view(node, partition, view.unanswered(request))
        self._tick(node)
        self.append(index, partition, earlier=1)

    @rule(index=node_ids, partition=partition_ids)
    def watch_wakes(self, index: int, partition: int) -> None:
        """The node's watch on the key fires (a renewal, an expiry): it reads at once."""
        node = self.nodes[index]
        if node.running:
            node.views[partition] = node.views[partition].key_changed()
            self._tick(node)

    @rule(index=node_ids)
    def pause(self, index: int) -> None:
        self.nodes[index].paused = True

    @rule(index=node_ids)
    def resume(self, index: int) -> None:
        self.nodes[index].paused = False

    @rule(index=node_ids)
    def crash(self, index: int) -> None:
        self.nodes[index].down = True

    @rule(index=node_ids, clock_ms=st.integers(0, 10**12))
    def restart(self, index: int, clock_ms: int) -> None:
        if self.nodes[index].down:
            self.nodes[index].restart(clock_ms)

    @rule(index=node_ids)
    def graceful_stop(self, index: int) -> None:
        """SIGTERM: stop firing, hand every lease back, go down."""
        node = self.nodes[index]
        if not node.running:
            return
        for partition in range(PARTITIONS):
            released = node.views[partition].release()
            assert released.verdict(node.clock_ms) is not Verdict.OWN
            self._set_view(node, partition, run(released, self.store, node.clock_ms))
        node.down = True

    @rule(index=node_ids, partition=partition_ids, earlier=st.integers(0, 3))
    def append(self, index: int, partition: int, earlier: int) -> None:
        """An append by one of this node's takeovers of the partition, under the marker it
        fenced with, whatever its verdict: the latest (`earlier` 0), or an earlier one's (a
        slow append still in flight after its sender was deposed, or after the node gave
        the partition up and took it anew under the same lease). A later takeover reads
        the log after fencing, so an earlier one's append must never land after that."""
        node = self.nodes[index]
        used = node.markers_used[partition]
        if node.down or not used:
            return
        taken = max(0, len(used) - 1 - earlier)
        marker_sequence = used[taken]
        log = self.logs[partition]
        later = any(sequence > marker_sequence for sequence, _ in log.markers)
        held = node.views[partition].held
        current = held is not None and held.marker_sequence == marker_sequence
        was_owner = current and node.verdict(partition) is Verdict.OWN
        accepted = log.append(marker_sequence) is not None
        assert accepted != later, f"marker {marker_sequence}: accepted={accepted}, later={later}"
        if taken < len(used) - 1:  # a later takeover by this node read the log after it
            assert not accepted, f"{node.holder}: an earlier takeover's append was accepted"
        if was_owner:
            assert accepted, f"{node.holder}, OWN under marker {marker_sequence}, was refused"

    @precondition(lambda self: any(node.running for node in self.nodes))
    @rule(partition=partition_ids)
    def failover_drill(self, partition: int) -> None:
        """From here, the running nodes watch the key and tick every step (the paused and
        the down stay so): a running node owns the partition within LIVENESS_MS (a paused
        owner fires nothing, so it does not count)."""
        started = self.real_ms
        while not [node for node in self._owners(partition) if node.running]:
            assert self.real_ms - started <= LIVENESS_MS, (
                f"p{partition}: no owner {self.real_ms - started} ms into the drill"
            )
            self._advance(DRILL_STEP_MS)
            for node in self.nodes:
                if node.running:
                    # a standby watches the key, so it reads the moment the lease expires
                    node.views[partition] = node.views[partition].key_changed()
                    self._tick(node)

    # -- invariants ----------------------------------------------------------------------
    @invariant()
    def at_most_one_owner(self) -> None:
        self._check_one_owner()

    @invariant()
    def markers_have_increasing_epochs(self) -> None:
        for log in self.logs:
            markers = [marker for _, marker in log.markers]
            epochs = [marker.epoch for marker in markers]
            assert epochs == sorted(epochs), epochs
            for before, after in itertools.pairwise(markers):
                if before.epoch == after.epoch:
                    assert before.holder == after.holder, (before, after)


OwnershipModel.TestCase.settings = settings(
    max_examples=examples(150),
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_ownership_model = OwnershipModel.TestCase


def test_the_terms_refuse_a_margin_the_drift_could_beat():
    least = LeaseTerms.least_margin_ms(4_000, RHO_PPM)
    assert least == 80  # 4,000 * 2 % / 1.01 = 79.2
    LeaseTerms(ttl_ms=4_000, renew_every_ms=1_000, margin_ms=least, max_drift_ppm=RHO_PPM)
    try:
        LeaseTerms(ttl_ms=4_000, renew_every_ms=1_000, margin_ms=least - 1, max_drift_ppm=RHO_PPM)
    except ValueError as refused:
        assert "must be at least" in str(refused)
    else:
        raise AssertionError("a margin below the drift's least was accepted")


def test_the_terms_refuse_a_renewal_one_loss_would_lapse():
    try:
        LeaseTerms(ttl_ms=4_000, renew_every_ms=2_000, margin_ms=1_000)
    except ValueError as refused:
        assert "at most half" in str(refused)
    else:
        raise AssertionError("a renewal of more than half the hold was accepted")
