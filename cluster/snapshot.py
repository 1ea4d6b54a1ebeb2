"""A partition's snapshot: its live timers (the log's fold) through a stream sequence, and
the pointer that names it (docs/cluster.md, "The bounded log"; decision 0011).

Pure (no I/O): `timerwheel.cluster.snapshot_io` stores what this module encodes.

- The **object** `p<N>/<S>` in the object store `timerwheel-snapshots` holds the fold of
  every log record of partition N with stream sequence <= S: one header line
  (`{"v":1,"partition":N,"through":S,"live":k}`), then the live timers as one journal
  record (`timerwheel.cluster.journal.encode`: sends, in the order first sent).
- The **pointer** on `tw.p<N>.snap` is `{"through":S,"object":"p<N>/<S>","digest":
  "sha256:<hex>","size":bytes,"live":k,"epoch":E}`. A node that loads the object checks
  its size and digest against the pointer and the header against the pointer's S, and
  refuses the partition on any mismatch (`SnapshotInvalid`): the log below S is purged,
  so a snapshot that cannot be read cannot be replaced by replaying more.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from timerwheel.cluster import journal

VERSION = 1
BUCKET = "timerwheel-snapshots"


class SnapshotInvalid(Exception):
    """The latest snapshot of a partition is missing or does not match its pointer: the
    node refuses to own the partition rather than serve a part of its timers."""


def snap_subject(partition: int) -> str:
    """Where a partition's snapshot pointers go (in the partition's stream)."""
    return f"tw.p{partition}.snap"


def object_name(partition: int, through: int) -> str:
    return f"p{partition}/{through}"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Pointer:
    through: int  # every log record with stream sequence <= this is in the object
    object: str
    digest: str
    size: int
    live: int
    epoch: int

    def encode(self) -> bytes:
        return json.dumps(self.__dict__, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> Pointer:
        try:
            fields = json.loads(data)
            return cls(
                int(fields["through"]), str(fields["object"]), str(fields["digest"]),
                int(fields["size"]), int(fields["live"]), int(fields["epoch"]),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as error:
            raise SnapshotInvalid(f"snapshot pointer not readable: {error}") from error


def encode(partition: int, through: int, fold: journal.Fold) -> bytes:
    header = {"v": VERSION, "partition": partition, "through": through, "live": len(fold.live)}
    body = journal.encode(list(fold.live.values()))
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + body


def decode(partition: int, pointer: Pointer, data: bytes) -> journal.Fold:
    """The fold the object holds, after checking it is the one the pointer names. Its
    `records` count starts at 0: it counts what is replayed on top."""
    if len(data) != pointer.size or digest(data) != pointer.digest:
        raise SnapshotInvalid(
            f"partition {partition}: snapshot {pointer.object} is {len(data)} bytes, "
            f"{digest(data)}; its pointer says {pointer.size} bytes, {pointer.digest}"
        )
    head, _, body = data.partition(b"\n")
    try:
        header = json.loads(head)
        entries = journal.decode(body)
    except (ValueError, journal.BadRecord) as error:
        raise SnapshotInvalid(f"partition {partition}: snapshot not readable: {error}") from error
    if header.get("v") != VERSION or header.get("partition") != partition:
        raise SnapshotInvalid(f"partition {partition}: snapshot header {header}")
    if header.get("through") != pointer.through or header.get("live") != len(entries):
        raise SnapshotInvalid(f"partition {partition}: snapshot header {header} for {pointer}")
    fold = journal.Fold()
    for entry in entries:
        if not isinstance(entry, journal.Sent):
            raise SnapshotInvalid(f"partition {partition}: snapshot holds a {type(entry)}")
        fold.live[entry.message_id] = entry
    return fold
