"""A node's view of one partition's lease, and its verdict (docs/cluster.md, "Ownership").

Pure, like wheels/scheduler.py: immutable states, the time passed in (the node's own
monotonic clock, in ms), verdicts rather than actions. `plan` says what to ask the lease
store next; `answered` and `unanswered` fold the store's answer (or its absence) into the
view; `verdict` says what the node may do at a given moment. `run` strings them together
over a `LeaseStore`, for the in-memory twin and for tests.

The lease
---------
One key per partition in a replicated key-value store (a JetStream KV bucket whose TTL is
the lease's): taken by `create` (fails if the key exists), renewed by compare-and-set on the
key's revision (`update(..., expected_revision)`), expired by the store `ttl` after its last
write, on the store's clock. The **epoch** is the revision of the create that won it: a
bucket's revisions only grow, so each new owner's epoch is above every earlier one, even
after the key expired and its value is gone.

The local deadline
------------------
The holder may fire and deliver only until `renewed_at + ttl - margin` on its own monotonic
clock, where `renewed_at` is when it *sent* the last write it saw succeed. The store wrote
that renewal after it was sent and expires it `ttl` after writing, so with every clock's
rate within `1 ± d` of true time the holder stops before the store could let another node
create the key, provided `margin > ttl * 2d / (1 + d)` (`LeaseTerms` checks it for the
drift it names). A renewal whose answer never came changes nothing: the deadline stays
where the last known success put it.

The verdicts
------------
- OWN: holds the lease, its epoch marker is written (cluster/fencing.py), and the deadline
  has not passed. It may fire, deliver and append.
- STOP: held the lease, but the deadline passed. It fires and delivers nothing and keeps
  renewing: a compare-and-set that still succeeds proves nobody took the lease meanwhile
  (it is OWN again, same epoch); one that fails means it lost it (STANDBY), unless the
  read that follows finds its own write there (below).

A refused renewal
-----------------
A compare-and-set is refused when the key's revision is not the one asserted: another
node took the lease, or it expired, or this node's own earlier renewal landed though its
answer was lost (or is still being committed: JetStream's 10164). So a refused renewal
is not yet a loss: the view keeps its lease, with the deadline where the last known
success put it (so it stops firing in time whatever the answer), and reads the key next.
The read decides: its own write, same epoch, is adopted with its marker, and the lease
goes on without a break; anything else (absent, another holder) is the loss.
- STANDBY: holds no lease (or has not fenced yet, or is releasing). It applies the stream
  and acquires when the key is absent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Protocol

from timerwheel.cluster.partitions import lease_key

PPM = 1_000_000


class Verdict(Enum):
    OWN = "own"
    STOP = "stop"
    STANDBY = "standby"


@dataclass(frozen=True)
class LeaseTerms:
    """How long a lease lasts and how it is kept. `max_drift_ppm` is the clock-rate error
    (in parts per million, of the nodes' and the store's clocks alike) the margin must
    cover; an NTP-disciplined clock is within 100 ppm, so the default of 1 % is generous."""

    ttl_ms: int = 4_000
    renew_every_ms: int = 1_000
    margin_ms: int = 1_000
    max_drift_ppm: int = 10_000

    def __post_init__(self) -> None:
        if self.ttl_ms <= 0 or self.renew_every_ms <= 0:
            raise ValueError(
                f"lease ttl {self.ttl_ms} ms, renewal {self.renew_every_ms} ms: must be > 0"
            )
        if not 0 <= self.max_drift_ppm < PPM:
            raise ValueError(f"max_drift_ppm {self.max_drift_ppm}: must be 0 to {PPM - 1}")
        least = self.least_margin_ms(self.ttl_ms, self.max_drift_ppm)
        if not least <= self.margin_ms < self.ttl_ms:
            raise ValueError(
                f"lease margin {self.margin_ms} ms: must be at least {least} ms (clocks off by "
                f"{self.max_drift_ppm} ppm over a {self.ttl_ms} ms lease) and below the ttl"
            )
        if 2 * self.renew_every_ms > self.hold_ms:
            raise ValueError(
                f"lease renewal every {self.renew_every_ms} ms: must be at most half of ttl - "
                f"margin ({self.hold_ms} ms), so one lost renewal does not lapse the lease"
            )

    @property
    def hold_ms(self) -> int:
        """How long after sending a successful write the holder may act on it."""
        return self.ttl_ms - self.margin_ms

    @staticmethod
    def least_margin_ms(ttl_ms: int, max_drift_ppm: int) -> int:
        """The smallest whole margin with margin > ttl * 2d / (1 + d), d = ppm / 10**6: a
        holder whose clock runs slow by d then still stops before a store whose clock runs
        fast by d expires its last write."""
        return 2 * ttl_ms * max_drift_ppm // (PPM + max_drift_ppm) + 1


@dataclass(frozen=True)
class LeaseValue:
    """What the lease key holds. `epoch` 0 in the create that wins a lease (it cannot know
    its own revision); renewals carry it. `sent_at_ms` is the holder's monotonic reading
    when it sent this write: only the holder reads it (to adopt a write whose answer it
    lost), no other clock is compared with it."""

    holder: str
    epoch: int
    sent_at_ms: int
    address: str = ""

    def encode(self) -> bytes:
        fields = {"holder": self.holder, "epoch": self.epoch, "sent_at_ms": self.sent_at_ms}
        return json.dumps({**fields, "address": self.address}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> LeaseValue:
        fields = json.loads(data)
        return cls(
            str(fields["holder"]), int(fields["epoch"]), int(fields["sent_at_ms"]),
            str(fields.get("address", "")),
        )  # fmt: skip


@dataclass(frozen=True)
class LeaseEntry:
    value: LeaseValue
    revision: int

    @property
    def epoch(self) -> int:
        """The lease's epoch: the revision of the create that won it."""
        return self.value.epoch or self.revision


class LeaseStore(Protocol):
    """The lease bucket as the ownership logic needs it. A conflict is an answer (None or
    False), not an error: it is the normal way of losing a race. A store that cannot answer
    (a timeout) raises, and the caller folds that in with `unanswered`."""

    def get(self, key: str) -> LeaseEntry | None:
        """The live entry, or None if the key is absent or expired."""
        ...

    def create(self, key: str, value: LeaseValue) -> int | None:
        """The new revision, or None if the key exists (and has not expired)."""
        ...

    def update(self, key: str, value: LeaseValue, expected_revision: int) -> int | None:
        """The new revision, or None unless the key's live revision is `expected_revision`."""
        ...

    def delete(self, key: str, expected_revision: int) -> bool:
        """Remove the key if its live revision is `expected_revision`."""
        ...


# -- requests: what the view asks the store ------------------------------------------------
@dataclass(frozen=True)
class Read:
    key: str
    sent_at_ms: int


@dataclass(frozen=True)
class Create:
    key: str
    value: LeaseValue


@dataclass(frozen=True)
class Renew:
    key: str
    value: LeaseValue
    expected_revision: int


@dataclass(frozen=True)
class Release:
    key: str
    expected_revision: int


Request = Read | Create | Renew | Release


@dataclass(frozen=True)
class Held:
    """A lease this node holds: its epoch, the key's revision as last written by this node,
    when that write was sent, and the stream sequence of this epoch's marker once written."""

    epoch: int
    revision: int
    renewed_at_ms: int
    marker_sequence: int | None = None


@dataclass(frozen=True)
class LeaseView:
    """One node's view of one partition's lease. `holder` names this node and its
    incarnation (a restarted process is another holder: it never adopts its predecessor's
    lease, it waits for it to expire like any other node)."""

    partition: int
    holder: str
    terms: LeaseTerms
    address: str = ""
    held: Held | None = None
    seen: LeaseEntry | None = None  # the last entry read: who holds it (for "not owner")
    read_at_ms: int | None = None  # when the last read was sent
    absent: bool = False  # the last read found no live key: create next (while it is fresh)
    releasing: bool = False
    refused: bool = False  # a renewal was refused: read the key before anything else

    @property
    def key(self) -> str:
        return lease_key(self.partition)

    def deadline_ms(self) -> int | None:
        """When this node must have stopped firing, on its monotonic clock."""
        return None if self.held is None else self.held.renewed_at_ms + self.terms.hold_ms

    def verdict(self, now_ms: int) -> Verdict:
        held = self.held
        if held is None or self.releasing:
            return Verdict.STANDBY
        if now_ms >= held.renewed_at_ms + self.terms.hold_ms:
            return Verdict.STOP
        if held.marker_sequence is None:
            return Verdict.STANDBY
        return Verdict.OWN

    def needs_marker(self) -> bool:
        """Holds a lease but has not written (or found) its epoch marker yet."""
        return self.held is not None and self.held.marker_sequence is None

    # -- what to ask next ----------------------------------------------------------------
    def plan(self, now_ms: int) -> Request | None:
        """The store call this node should make now, if any."""
        held = self.held
        if self.releasing:
            return None if held is None else Release(self.key, held.revision)
        if held is not None and self.refused:
            return Read(self.key, now_ms)
        if held is not None:
            if now_ms - held.renewed_at_ms < self.terms.renew_every_ms:
                return None
            value = LeaseValue(self.holder, held.epoch, now_ms, self.address)
            return Renew(self.key, value, held.revision)
        due = self.read_at_ms is None or now_ms - self.read_at_ms >= self.terms.renew_every_ms
        if self.absent and not due:
            return Create(self.key, LeaseValue(self.holder, 0, now_ms, self.address))
        # absent too: a node not let to take it must still learn who did
        return Read(self.key, now_ms) if due else None

    # -- what the store said -------------------------------------------------------------
    def answered(self, request: Request, answer: LeaseEntry | int | bool | None) -> LeaseView:
        if isinstance(request, Read):
            assert answer is None or isinstance(answer, LeaseEntry)
            return self._read(request, answer)
        if isinstance(request, Create):
            assert answer is None or isinstance(answer, int)
            if answer is None:  # someone else was first
                return replace(self, absent=False, seen=None)
            held = Held(epoch=answer, revision=answer, renewed_at_ms=request.value.sent_at_ms)
            return replace(self, held=held, absent=False, seen=LeaseEntry(request.value, answer))
        if isinstance(request, Renew):
            assert answer is None or isinstance(answer, int)
            if answer is None:  # the key moved on: to whom, the read decides
                return replace(self, refused=True, absent=False, seen=None, read_at_ms=None)
            assert self.held is not None
            held = replace(self.held, revision=answer, renewed_at_ms=request.value.sent_at_ms)
            return replace(self, held=held, seen=LeaseEntry(request.value, answer))
        # Release: whether or not the delete found the key, this node holds nothing now
        return replace(self, held=None, seen=None)

    def unanswered(self, request: Request) -> LeaseView:
        """The call timed out: it may or may not have happened. Nothing is learned; the
        deadline stays where the last known success put it, and a lost create or renewal
        is adopted from the next read if it did happen (`_read`)."""
        if isinstance(request, Create):
            return replace(self, absent=False, read_at_ms=None)
        return self

    def _read(self, request: Read, entry: LeaseEntry | None) -> LeaseView:
        view = replace(
            self, seen=entry, read_at_ms=request.sent_at_ms, absent=entry is None, refused=False
        )
        if entry is None:
            return replace(view, held=None)
        if entry.value.holder != self.holder:
            return replace(view, held=None)
        # Our own write (a create or renewal whose answer was lost): adopt it. It was sent
        # at value.sent_at_ms on this very clock, and written after that.
        held = self.held
        if held is not None and held.epoch == entry.epoch:
            if entry.revision <= held.revision:
                return view
            adopted = replace(held, revision=entry.revision, renewed_at_ms=entry.value.sent_at_ms)
        else:
            adopted = Held(entry.epoch, entry.revision, entry.value.sent_at_ms)
        return replace(view, held=adopted)

    def key_changed(self) -> LeaseView:
        """A watch on the key saw it change or expire: read it at the next `plan` instead of
        waiting out the read interval (a standby takes an expired lease at once)."""
        return replace(self, read_at_ms=None)

    # -- fencing ---------------------------------------------------------------------------
    def fenced(self, marker_sequence: int) -> LeaseView:
        """Its epoch marker is in the stream at `marker_sequence`: appends may assert it."""
        assert self.held is not None
        return replace(self, held=replace(self.held, marker_sequence=marker_sequence))

    def deposed(self) -> LeaseView:
        """A newer epoch's marker is in the stream: whatever the store said, give it up."""
        return replace(self, held=None, seen=None, read_at_ms=None, absent=False, refused=False)

    def release(self) -> LeaseView:
        """Stop firing now (the verdict is STANDBY from here) and hand the lease back."""
        return replace(self, releasing=True)


def run(view: LeaseView, store: LeaseStore, now_ms: int) -> LeaseView:
    """Make the calls `view.plan` asks for at `now_ms` (a read may lead to a create), the
    store answering at once."""
    for _ in range(3):
        request = view.plan(now_ms)
        if request is None:
            break
        view = view.answered(request, call(store, request))
    return view


def call(store: LeaseStore, request: Request) -> LeaseEntry | int | bool | None:
    """Carry one request out against `store`."""
    if isinstance(request, Read):
        return store.get(request.key)
    if isinstance(request, Create):
        return store.create(request.key, request.value)
    if isinstance(request, Renew):
        return store.update(request.key, request.value, request.expected_revision)
    return store.delete(request.key, request.expected_revision)


@dataclass
class MemoryLeaseStore:
    """The in-memory twin of the lease bucket: one revision counter for every key (a
    JetStream stream's sequence), and each key expiring `ttl_ms` after its last write by
    the store's own clock, `now_ms` (set by the test: it may drift from the nodes')."""

    ttl_ms: int
    now_ms: int = 0
    revision: int = 0
    entries: dict[str, tuple[LeaseEntry, int]] = field(default_factory=dict)  # (entry, written)

    def _live(self, key: str) -> LeaseEntry | None:
        found = self.entries.get(key)
        if found is None:
            return None
        entry, written_ms = found
        if self.now_ms >= written_ms + self.ttl_ms:
            del self.entries[key]
            return None
        return entry

    def _write(self, key: str, value: LeaseValue) -> int:
        self.revision += 1
        self.entries[key] = (LeaseEntry(value, self.revision), self.now_ms)
        return self.revision

    def get(self, key: str) -> LeaseEntry | None:
        return self._live(key)

    def create(self, key: str, value: LeaseValue) -> int | None:
        return None if self._live(key) is not None else self._write(key, value)

    def update(self, key: str, value: LeaseValue, expected_revision: int) -> int | None:
        live = self._live(key)
        if live is None or live.revision != expected_revision:
            return None
        return self._write(key, value)

    def delete(self, key: str, expected_revision: int) -> bool:
        live = self._live(key)
        if live is None or live.revision != expected_revision:
            return False
        del self.entries[key]
        return True
