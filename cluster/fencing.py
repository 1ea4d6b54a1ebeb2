"""Epoch markers and the append check that fences a deposed owner (docs/cluster.md,
"Ownership" and "Pinned NATS semantics").

A partition's stream has an epoch subject (`tw.p<N>.epoch`). A new owner writes an
`EpochMarker` there, and every later append carries the headers
`Nats-Expected-Last-Subject-Sequence: <the marker's stream sequence>` and
`Nats-Expected-Last-Subject-Sequence-Subject: <the epoch subject>`. JetStream accepts the
append only if the epoch subject's last sequence is still that marker's: once a newer owner
has written its marker, every append of the old one is refused (error 10071, "wrong last
sequence: <the newer marker's sequence>"), whatever it believes about its lease. That is
the second line of defence behind the lease's local deadline: it holds under any clock.

The marker itself is written with the same kind of assertion on the epoch subject's last
sequence as the new owner read it, and only if the marker it read has a lower epoch
(`marker_step`): of two nodes that both think they just won, one write fails, and a node
that finds a newer marker knows it is deposed.

`MemoryPartitionLog` is an in-memory twin of one partition's stream, for tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum

EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
WRONG_LAST_SEQUENCE = 10071  # JetStream's err_code for a refused expectation (pinned)


@dataclass(frozen=True)
class EpochMarker:
    """What a new owner writes on the epoch subject: its epoch and who it is (so a node
    that reads the marker can name the owner)."""

    epoch: int
    holder: str
    address: str = ""

    def encode(self) -> bytes:
        return json.dumps(
            {"epoch": self.epoch, "holder": self.holder, "address": self.address},
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> EpochMarker:
        fields = json.loads(data)
        return cls(int(fields["epoch"]), str(fields["holder"]), str(fields.get("address", "")))


def append_allowed(expected_last_sequence: int, actual_last_sequence: int) -> bool:
    """JetStream's rule for a publish carrying `Nats-Expected-Last-Subject-Sequence`: it is
    stored iff the named subject's last sequence is exactly the expected one (0: the subject
    has no message). Pinned against the real server by tests/cluster/test_nats_semantics.py."""
    return expected_last_sequence == actual_last_sequence


def fencing_headers(epoch_subject: str, marker_sequence: int) -> dict[str, str]:
    """The headers of every append an owner makes under its marker."""
    return {
        EXPECTED_LAST_SUBJECT_SEQUENCE: str(marker_sequence),
        EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT: epoch_subject,
    }


def marker_headers(last_marker_sequence: int) -> dict[str, str]:
    """The headers of a marker write: published on the epoch subject itself, asserting its
    last sequence as the writer read it (0 when there was none)."""
    return {EXPECTED_LAST_SUBJECT_SEQUENCE: str(last_marker_sequence)}


class MarkerStep(Enum):
    WRITE = "write"  # the last marker is older, or this lease's own: write ours after it
    DEPOSED = "deposed"  # a newer epoch (or another holder) has written its marker: give up


def marker_step(own_epoch: int, holder: str, last: EpochMarker | None) -> MarkerStep:
    """What a node that won `own_epoch` does on finding `last` as the epoch subject's last
    marker.

    A marker of its own epoch is written again, never adopted: it is either a write whose
    answer was lost, or an earlier takeover by this very lease (a renewal refused, its own
    lease read back, the partition given up and taken anew). In the second case that
    earlier takeover's appender may still have a publish in flight under the old marker;
    only a new marker fences it, so it cannot land after this takeover has read the log."""
    if last is None or last.epoch < own_epoch:
        return MarkerStep.WRITE
    if last.epoch == own_epoch and last.holder == holder:
        return MarkerStep.WRITE
    return MarkerStep.DEPOSED


@dataclass
class MemoryPartitionLog:
    """One partition's stream in memory: one sequence for the whole stream, the epoch
    subject's markers, and appends checked as JetStream checks them."""

    last_sequence: int = 0
    markers: list[tuple[int, EpochMarker]] = field(default_factory=list)  # (sequence, marker)
    appends: list[tuple[int, int]] = field(default_factory=list)  # (sequence, marker's epoch)

    def last_marker(self) -> tuple[int, EpochMarker | None]:
        """The epoch subject's last sequence (0 if none) and its marker."""
        return self.markers[-1] if self.markers else (0, None)

    def write_marker(self, marker: EpochMarker, expected_last_sequence: int) -> int | None:
        """The marker's sequence, or None if the epoch subject moved on meanwhile."""
        if not append_allowed(expected_last_sequence, self.last_marker()[0]):
            return None
        self.last_sequence += 1
        self.markers.append((self.last_sequence, marker))
        return self.last_sequence

    def append(self, marker_sequence: int) -> int | None:
        """An owner's group commit under the marker at `marker_sequence`: its sequence, or
        None when refused (a newer marker was written)."""
        actual, marker = self.last_marker()
        if not append_allowed(marker_sequence, actual) or marker is None:
            return None
        self.last_sequence += 1
        self.appends.append((self.last_sequence, marker.epoch))
        return self.last_sequence
