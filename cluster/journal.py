"""A partition's log records, and the fold that rebuilds its live timers from them.

Pure (no I/O): the node (`timerwheel.cluster.node`) appends what this module encodes and
folds what it decodes (docs/cluster.md, "The log").

A record is one JetStream message on `tw.p<N>.log`: every change one owner's group of
callers was told took effect, in the order its engine applied them. An entry is logged
only after the owner's engine applied it, and its caller is answered only after the
record is in the log (a quorum fsynced it), so the log holds exactly what was promised:

| entry        | fields                                              | the fold              |
|--------------|-----------------------------------------------------|-----------------------|
| `send`       | id, topic, body, properties, deliver time (ms),     | live[id] = the send   |
|              | send options (`store.extras` bytes), if-exists      |                       |
| `cancel`     | ids                                                 | drop each             |
| `ack`        | ids (a recurring occurrence's `<series>#<n>` too)   | drop each             |
| `reschedule` | id, new deliver time (ms)                           | live[id].time = it    |
|              |                                                     | (not of a series)     |
| `series`     | series id, occurrences fired (number, schedule      | live[id#n] = each     |
|              | time), the series as left (a send: its `extras`     | occurrence; live[id]  |
|              | hold the next number, time, paused), or null        | = the series, or drop |

A series' every change (sent, moved, paused, stepped, retired) is logged by the owner as
its engine committed it (`timerwheel.cluster.series_log`), in commit order and before the
callers of that commit are answered; its occurrences are logged as they fire, so an
un-acked one fires again after a takeover, and an acked one (its `ack`) does not.

What is not logged, and why it costs no acknowledged message: fires (a new owner fires
again what is due and not acked: at least once), delivery attempts and nacks (counted
again from zero after a takeover), dead-letter moves (the message is fired again on its
topic after a takeover, and dead-lettered again if it keeps failing).

Encoding: JSON (`{"v": 1, "e": [[kind, ...], ...]}`), bodies and options in base64: a
record is one group commit, so its framing is paid once per commit, not per timer.

Versions (docs/cluster.md, "Upgrading a cluster"): a record carries the lowest version
whose readers know everything in it: 1 for `send`, `cancel`, `ack` and `reschedule`; 2
once it holds a `series` entry, or a series' own send or a fired occurrence (a
snapshot's: a version-1 node restores through `send_batch`, which would start the series
again and refuses an occurrence's id `<series>#<n>`). A reader refuses a record of a
version above its own, and an entry of a kind it does not know, and never skips one:
skipping a `series` entry would rebuild the partition without that series (or with it
as it was before), silently. A node of version 1 thus reads every record a
cluster that sends no recurring series writes, and refuses the rest (BadRecord).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from timerwheel.engine.series import SERIES_ID, SERIES_OCCURRENCE, occurrence_id
from timerwheel.store.extras import decode_extras, encode_extras
from timerwheel.wheels.domain import IfExists, SendOptions, SendSpec, When, WhenKind

VERSION = 2  # the newest version this build reads; it reads every older one
KIND_VERSION = {"send": 1, "cancel": 1, "ack": 1, "reschedule": 1, "series": 2}


@dataclass(frozen=True, slots=True)
class Sent:
    message_id: str
    topic: str
    body: bytes
    properties: Mapping[str, str]
    deliver_at_ms: int
    options: bytes = b""  # store.extras.encode_extras of the send's options, if any

    def spec(self, not_before_ms: int = 0) -> SendSpec:
        """The send that places this timer again (at `not_before_ms` at the earliest, so
        a long-overdue timer stays inside the engine's past-time window: it fires at once
        either way)."""
        options = decode_extras(self.options) if self.options else None
        at_ms = max(self.deliver_at_ms, not_before_ms)
        return SendSpec(
            self.topic, self.body, When(WhenKind.DELIVER_AT, at_ms), dict(self.properties),
            self.message_id, IfExists.RESTORE, options,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Cancelled:
    message_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Acked:
    message_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Rescheduled:
    message_id: str
    deliver_at_ms: int


@dataclass(frozen=True, slots=True)
class SeriesState:
    series_id: str
    sent: Sent | None  # the series as its engine left it; None: retired (finished)
    occurrences: tuple[tuple[int, int], ...] = ()  # (number, schedule time) fired


Entry = Sent | Cancelled | Acked | Rescheduled | SeriesState


def body_bytes(entry: Entry) -> int:
    """The body bytes an entry carries (what bounds a record's size)."""
    if isinstance(entry, Sent):
        return len(entry.body)
    if isinstance(entry, SeriesState) and entry.sent is not None:
        return len(entry.sent.body)
    return 0


def is_series(sent: Sent) -> bool:
    """A recurring series' send: its options hold a `repeat` (store.extras)."""
    return b'"repeat"' in sent.options


def occurrence_of(series: Sent, number: int, at_ms: int) -> Sent:
    """Occurrence `number` of `series`, as its engine stores it when it fires
    (timerwheel.engine.series): the series' topic, body and properties and the series
    properties, its delivery options, due at its schedule time."""
    options = decode_extras(series.options) if series.options else None
    delivery = b""
    if options is not None and (
        options.max_attempts is not None or options.dead_letter_topic or options.retry
    ):
        kept = SendOptions(options.max_attempts, options.dead_letter_topic, retry=options.retry)
        delivery = encode_extras(kept)
    properties = {
        **series.properties, SERIES_ID: series.message_id, SERIES_OCCURRENCE: str(number)
    }  # fmt: skip
    return Sent(
        occurrence_id(series.message_id, number), series.topic, series.body, properties,
        at_ms, delivery,
    )  # fmt: skip


def sent_of(spec: SendSpec, message_id: str, deliver_at_ms: int) -> Sent:
    """The log entry of a send the engine stored under `message_id`, due `deliver_at_ms`."""
    options = encode_extras(spec.options, 1, deliver_at_ms) if spec.options else b""
    return Sent(message_id, spec.topic, spec.body, dict(spec.properties), deliver_at_ms, options)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _sent_row(entry: Sent) -> list:
    return [
        "send", entry.message_id, entry.topic, _b64(entry.body), dict(entry.properties),
        entry.deliver_at_ms, _b64(entry.options),
    ]  # fmt: skip


def _sent_of_row(row: list) -> Sent:
    _, message_id, topic, body, properties, at_ms, options = row
    return Sent(
        str(message_id), str(topic), base64.b64decode(body),
        {str(k): str(v) for k, v in properties.items()}, int(at_ms), base64.b64decode(options),
    )  # fmt: skip


def encode(entries: Iterable[Entry]) -> bytes:
    rows: list[list] = []
    version = 1  # the lowest whose readers know every row (module doc)
    for entry in entries:
        if isinstance(entry, Sent):
            rows.append(_sent_row(entry))
            if is_series(entry) or "#" in entry.message_id:  # a series' own send, or a
                version = 2  # fired occurrence `<series>#<n>` (a snapshot's): series state
        elif isinstance(entry, Cancelled):
            rows.append(["cancel", list(entry.message_ids)])
        elif isinstance(entry, Acked):
            rows.append(["ack", list(entry.message_ids)])
        elif isinstance(entry, Rescheduled):
            rows.append(["reschedule", entry.message_id, entry.deliver_at_ms])
        else:
            sent = None if entry.sent is None else _sent_row(entry.sent)
            occurrences = [list(occurrence) for occurrence in entry.occurrences]
            rows.append(["series", entry.series_id, occurrences, sent])
            version = KIND_VERSION["series"]
    return json.dumps({"v": version, "e": rows}, separators=(",", ":")).encode()


class BadRecord(ValueError):
    """A log record this version cannot read: the node refuses to own the partition rather
    than rebuild it without what the record held."""


def decode(data: bytes) -> list[Entry]:
    try:
        record = json.loads(data)
        version = record.get("v")
        if type(version) is not int or not 1 <= version <= VERSION:
            raise BadRecord(
                f"log record version {version!r}: this node reads versions 1 to {VERSION}; "
                "a newer node wrote it: upgrade this node (docs/cluster.md, 'Upgrading a "
                "cluster')"
            )
        entries: list[Entry] = []
        for row in record["e"]:
            kind = row[0]
            if kind == "send":
                entries.append(_sent_of_row(row))
            elif kind == "cancel":
                entries.append(Cancelled(tuple(str(i) for i in row[1])))
            elif kind == "ack":
                entries.append(Acked(tuple(str(i) for i in row[1])))
            elif kind == "reschedule":
                entries.append(Rescheduled(str(row[1]), int(row[2])))
            elif kind == "series":
                sent = None if row[3] is None else _sent_of_row(row[3])
                occurrences = tuple((int(n), int(at)) for n, at in row[2])
                entries.append(SeriesState(str(row[1]), sent, occurrences))
            else:  # refused, never skipped (module doc)
                raise BadRecord(
                    f"log entry kind {kind!r} in a version {version} record: this node reads "
                    f"{', '.join(KIND_VERSION)}"
                )
        return entries
    except (KeyError, TypeError, ValueError, IndexError) as error:
        if isinstance(error, BadRecord):
            raise
        raise BadRecord(f"log record not readable: {error}") from error


@dataclass
class Fold:
    """The live timers of one partition after the records folded so far: every send not
    cancelled or acked since, at its latest deliver time, in the order first sent."""

    live: dict[str, Sent] = field(default_factory=dict)
    records: int = 0
    entries: int = 0

    def apply(self, entries: Iterable[Entry]) -> None:
        self.records += 1
        for entry in entries:
            self.entries += 1
            if isinstance(entry, Sent):
                self.live[entry.message_id] = entry
            elif isinstance(entry, (Cancelled, Acked)):
                for message_id in entry.message_ids:
                    self.live.pop(message_id, None)
            elif isinstance(entry, SeriesState):
                self._series(entry)
            else:
                found = self.live.get(entry.message_id)
                # a series' move is its `series` entry (its time and its `extras`)
                if found is not None and not is_series(found):
                    self.live[entry.message_id] = Sent(
                        found.message_id, found.topic, found.body, found.properties,
                        entry.deliver_at_ms, found.options,
                    )  # fmt: skip

    def _series(self, entry: SeriesState) -> None:
        series = entry.sent or self.live.get(entry.series_id)
        if series is not None:
            for number, at_ms in entry.occurrences:
                occurrence = occurrence_of(series, number, at_ms)
                self.live[occurrence.message_id] = occurrence
        if entry.sent is None:
            self.live.pop(entry.series_id, None)
        else:
            self.live[entry.series_id] = entry.sent

    def specs(self, not_before_ms: int = 0) -> list[SendSpec]:
        return [sent.spec(not_before_ms) for sent in self.live.values()]
