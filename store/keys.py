"""The key layout of every column family. Byte order equals time order.

All integers are fixed-width big-endian unsigned, so lexicographic byte order (RocksDB's
default comparator) equals numeric order, and a time range is a key range.

==================  ============================================  ==========================
column family       key                                           value
==================  ============================================  ==========================
``messages``        message id (UTF-8)                            record (timerwheel.store.records)
``wheel_hour``      deliver_at_ms (8 B BE) + message id (UTF-8)   topic (UTF-8): enough to
``wheel_minute``    same                                          route, list and fire
``wheel_second``    same                                          without reading messages
``ready``           topic + 0x00 + fire seq (8 B BE)              message id (fired, not acked)
``expiry``          expire_at_ms (8 B BE) + message id            ACKED/CANCELLED records
                                                                  to remove then (after the
                                                                  retention period): empty,
                                                                  the key's message alone;
                                                                  or the ids retired
                                                                  together (one Ack's, the
                                                                  key's first), 0x00 between
``meta``            name (ASCII, see ``META_*``)                  8 B BE int, or a wheel key
``extras``          message id (UTF-8)                            JSON (timerwheel.store.extras
                                                                  ``encode_extras``): send
                                                                  options of the few
                                                                  messages that have them
                                                                  (max_attempts, dead-letter
                                                                  topic); written with the
                                                                  record, removed with it
``counts``          topic + 0x00 + minute start ms (8 B BE)       8 B BE int: SCHEDULED
                    topic + 0x01 (the topic's total)              timers due in that minute
                                                                  (timerwheel.store.counts); absent
                                                                  = 0
``trace``           message id + 0x00 + trace seq (8 B BE)        one event of the message's
                                                                  life (timerwheel.store.trace):
                                                                  only what its record cannot
                                                                  say; removed with it
==================  ============================================  ==========================

A slot of a wheel level is the key range [encode(slot_start), encode(slot_end)): the
empty id sorts first, so ``time_bound(t)`` is the smallest key at time t. Topics never
contain 0x00 (validation allows ``[A-Za-z0-9_.%|-]``), so ``topic + 0x00`` is a clean
prefix and one topic's ready entries are one contiguous range, in fire order. Message
ids never contain 0x00 either, so a message's trace events are one contiguous range,
in the order they were written (the trace seq, in ``meta``, only grows), and an
``expiry`` value can list ids with 0x00 between them: an Ack retires its messages at
one time, so one entry stands for all of them instead of one entry an id, which was
1 of the 6 entries a message writes in a burst (``expiry_entry``).

Wheels are named in values by one byte (``WHEEL_CODES``): trace events and the two
placement bits of a record (timerwheel.store.records).

Version 2 (planned, decision 0014): the batch-level layout's families and keys are in
``timerwheel.store.batch_keys`` (segments, per-batch wheel, ``ready``, ``acked``,
``segstate``, ``expiry``, ``overrides`` and ``ids`` entries), their values in
``timerwheel.store.segments`` and ``timerwheel.store.batch_entries``. Only
``timerwheel.store.batch_store`` opens them, for tests and benches: this module's layout
is the one the server writes stores in.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import itemgetter, mod, sub

from timerwheel.wheels.scheduler import TimerKey

U64 = struct.Struct(">Q")
TIME_BYTES = U64.size
TOPIC_SEPARATOR = b"\x00"
_SEPARATED_U64 = struct.Struct(">xQ")  # TOPIC_SEPARATOR (a pad byte is 0x00), then a u64
ID_SEPARATOR = b"\x00"  # between the ids of an `expiry` value

CF_MESSAGES = "messages"
CF_WHEEL = {"hour": "wheel_hour", "minute": "wheel_minute", "second": "wheel_second"}
CF_READY = "ready"
CF_EXPIRY = "expiry"
CF_META = "meta"
CF_EXTRAS = "extras"
CF_COUNTS = "counts"
CF_TRACE = "trace"
ALL_COLUMN_FAMILIES = (
    CF_MESSAGES, *CF_WHEEL.values(), CF_READY, CF_EXPIRY, CF_META, CF_EXTRAS, CF_COUNTS,
    CF_TRACE,
)  # fmt: skip
WHEEL_CODES = {"": 0, "second": 1, "minute": 2, "hour": 3}  # "": none (due at once)
WHEEL_NAMES = {code: name for name, code in WHEEL_CODES.items()}

META_SCHEMA_VERSION = b"schema_version"
META_NOW_MS = b"clock.now_ms"
META_FIRE_FROM = b"fire.from"
META_FIRE_SEQ = b"fire.seq"
META_COUNTS_BUILT = b"counts.built"  # the `counts` family covers every wheel key
META_TRACE_SEQ = b"trace.seq"  # the next trace event's seq
SCHEMA_VERSION = 1


def meta_horizon(lower_wheel: str) -> bytes:
    """Horizon of the cascade into `lower_wheel` (e.g. ``cascade.second.horizon_ms``)."""
    return f"cascade.{lower_wheel}.horizon_ms".encode()


def meta_pending(lower_wheel: str) -> bytes:
    """First upper-wheel key of a cut-off cascade into `lower_wheel`; absent when none."""
    return f"cascade.{lower_wheel}.pending_from".encode()


def encode_u64(value: int) -> bytes:
    return U64.pack(value)


def decode_u64(raw: bytes) -> int:
    return U64.unpack(raw)[0]


def time_bound(t_ms: int) -> bytes:
    """The smallest wheel/expiry key at time `t_ms`: a range-scan bound."""
    return U64.pack(t_ms)


def wheel_key(deliver_at_ms: int, message_id: str) -> bytes:
    return U64.pack(deliver_at_ms) + message_id.encode()


def wheel_keys(deliver_times_ms: Sequence[int], message_ids: Sequence[bytes]) -> list[bytes]:
    """`wheel_key` of many timers at once, ids already UTF-8 (no call per key)."""
    pack = U64.pack
    return [
        pack(t_ms) + message_id
        for t_ms, message_id in zip(deliver_times_ms, message_ids, strict=True)
    ]


def wheel_key_at(time_bytes: bytes, message_id: bytes) -> bytes:
    """The wheel key of `message_id` at a time already encoded as `time_bound` encodes it
    (cut out of a record by `records.DELIVER_AT_TIME_BOUND`, say: no decode and re-encode)."""
    return time_bytes + message_id


def expiry_entry(expire_at_ms: int, message_ids: Sequence[bytes]) -> tuple[bytes, bytes]:
    """The one `expiry` entry of messages retired together at one time (UTF-8 ids, at
    least one): keyed by the time and the first id, the ids in the value. A single
    message's value is empty, as a cancel's entry always was."""
    key = U64.pack(expire_at_ms) + message_ids[0]
    return key, (ID_SEPARATOR.join(message_ids) if len(message_ids) > 1 else b"")


def expiry_entry_ids(key: bytes, value: bytes) -> list[bytes]:
    """The ids (UTF-8) an `expiry` entry retires: the value's, else the key's one."""
    return value.split(ID_SEPARATOR) if value else [key[TIME_BYTES:]]


_ID_PART = itemgetter(slice(TIME_BYTES, None))


def wheel_key_ids(wheel_keys_: Iterable[bytes]) -> list[bytes]:
    """The message ids (UTF-8) of wheel or expiry keys, in order (sliced by `map` over an
    `itemgetter`, all in C: about a third cheaper than a comprehension's Python step a key)."""
    return list(map(_ID_PART, wheel_keys_))


def wheel_key_times_ms(wheel_keys_: Iterable[bytes]) -> list[int]:
    """The time part of wheel or expiry keys, in order (`key_time_ms` of many)."""
    unpack = U64.unpack_from
    return [unpack(key)[0] for key in wheel_keys_]


def encode_timer_key(key: TimerKey) -> bytes:
    return wheel_key(key.deliver_at_ms, key.message_id)


def decode_timer_key(raw: bytes) -> TimerKey:
    return TimerKey(U64.unpack_from(raw)[0], raw[TIME_BYTES:].decode())


def key_after(raw: bytes) -> TimerKey:
    """The immediate successor of a wheel key: ids never contain 0x00, so appending it
    gives the smallest key greater than `raw` (where a chunked scan resumes)."""
    return decode_timer_key(raw + b"\x00")


def encode_page_token(raw: bytes) -> str:
    """A List page token: the wheel key after which the next page starts, opaque to clients."""
    return base64.urlsafe_b64encode(raw).decode()


def decode_page_token(token: str) -> bytes:
    """The wheel key in a page token; ValueError when it is not one this codec made."""
    try:
        raw = base64.urlsafe_b64decode(token.encode())
        if len(raw) <= TIME_BYTES:
            raise ValueError("too short for a wheel key")
        decode_timer_key(raw)
    except (binascii.Error, UnicodeError) as exc:
        raise ValueError(str(exc)) from exc
    return raw


def key_time_ms(raw: bytes) -> int:
    """The time part of a wheel or expiry key."""
    return U64.unpack_from(raw)[0]


def ready_prefix(topic: str) -> bytes:
    return topic.encode() + TOPIC_SEPARATOR


def ready_key(topic: str, seq: int) -> bytes:
    return topic.encode() + TOPIC_SEPARATOR + U64.pack(seq)


def ready_keys(topic: bytes, seqs: Iterable[int]) -> list[bytes]:
    """`ready_key` of many fire seqs of one topic (UTF-8 already; the prefix made once)."""
    prefix, pack = topic + TOPIC_SEPARATOR, U64.pack
    return [prefix + pack(seq) for seq in seqs]


def ready_key_topic(raw: bytes) -> bytes:
    """The topic (UTF-8) of a ready key: everything before its first 0x00."""
    return raw.split(TOPIC_SEPARATOR, 1)[0]


def trace_prefix(message_id: bytes) -> bytes:
    """Every trace key of one message starts with this."""
    return message_id + TOPIC_SEPARATOR


def trace_keys(message_ids: Sequence[bytes], first_seq: int) -> list[bytes]:
    """The trace keys of events of `message_ids`, in order, numbered from `first_seq`
    (separator and seq packed as one: one concatenation a key, not two)."""
    pack = _SEPARATED_U64.pack
    return [message_id + pack(seq) for seq, message_id in enumerate(message_ids, first_seq)]


def ready_seq(raw: bytes) -> int:
    return U64.unpack_from(raw, len(raw) - TIME_BYTES)[0]


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with `prefix` (an upper bound)."""
    # Topics are ASCII and never end in 0xff, so incrementing the last byte suffices.
    return prefix[:-1] + bytes([prefix[-1] + 1])


COUNT_BUCKET_MS = 60_000
NO_TIME_BOUND_MS = 2**63 - 1  # later than any deliver time: "no upper bound"
TOTAL_MARK = b"\x01"  # sorts after every topic + 0x00 + minute key of the same topic


def count_bucket_key(topic: bytes, bucket_start_ms: int) -> bytes:
    """The `counts` key of one minute of one topic."""
    return topic + TOPIC_SEPARATOR + U64.pack(bucket_start_ms)


def count_bucket_tally(topics: Sequence[bytes], deliver_times_ms: Sequence[int]) -> Counter[bytes]:
    """{minute counter: how many of the timers (topic i due at time i) it counts}.

    A fire chunk is most often one topic within one minute: that case is recognised by
    C-implemented builtins (`list.count`, `min`, `max`) with no Python step per timer, and
    gives one key without building a pair a timer, where the pairs were a visible share of
    a burst's fire step. Otherwise the pairs are counted in C too, a `Counter` of (topic,
    minute) pairs with the minutes made by `map`, and a key is made once per distinct
    minute: a SendBatch falls in a few minutes of a few topics, so a few keys are made
    where a key a timer cost a Python call each."""
    if not topics:
        return Counter()
    first_topic, earliest_ms = topics[0], min(deliver_times_ms)
    start_ms = earliest_ms - earliest_ms % COUNT_BUCKET_MS
    one_minute = max(deliver_times_ms) < start_ms + COUNT_BUCKET_MS
    if one_minute and topics.count(first_topic) == len(topics):
        return Counter({count_bucket_key(first_topic, start_ms): len(topics)})
    starts = map(sub, deliver_times_ms, map(mod, deliver_times_ms, repeat(COUNT_BUCKET_MS)))
    pairs = Counter(zip(topics, starts, strict=True))
    return Counter({count_bucket_key(topic, start): n for (topic, start), n in pairs.items()})


def count_total_key(topic: bytes) -> bytes:
    return topic + TOTAL_MARK


def count_total_topic(key: bytes) -> bytes:
    """The topic (UTF-8) of a total counter key."""
    return key[: -len(TOTAL_MARK)]


def is_count_total_key(key: bytes) -> bool:
    """A topic's total key (topic + 0x01); a minute key holds the 0x00 separator."""
    return key.endswith(TOTAL_MARK) and TOPIC_SEPARATOR not in key


def count_keys(topic: bytes, deliver_at_ms: int) -> tuple[bytes, bytes]:
    """The minute and total counters a timer of `topic` due at `deliver_at_ms` is in."""
    bucket = count_bucket_key(topic, deliver_at_ms - deliver_at_ms % COUNT_BUCKET_MS)
    return bucket, count_total_key(topic)


# A minute counter key's topic is `key[:COUNT_TOPIC_END]` (a slice, not a call: the send
# path's counters run once per timer, timerwheel.store.counts).
COUNT_TOPIC_END = -(TIME_BYTES + len(TOPIC_SEPARATOR))
