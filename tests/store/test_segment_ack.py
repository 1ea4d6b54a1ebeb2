"""The version-2 Ack and sweep (timerwheel.store.segment_ack) over the memory of the live
segments (timerwheel.store.segment_life), in a real version-2 store: one `acked` entry an
Ack call, a chunk's `ready` entry deleted with its last ack, `segstate` and `expiry` with a
segment's last terminal message, the ids it refuses, the memory rebuilt by a reopen, and
the sweep of a segment with what its overrides left in the wheels."""

from __future__ import annotations

from helpers.batch_v2 import commit, fire, open_v2

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.keys import CF_WHEEL
from timerwheel.store.segment_ack import Acked
from timerwheel.store.segment_ids import parse_id
from timerwheel.store.segment_send import NewSends

NOW = 1_200_000
RETENTION_MS = 5_000


def send(store, deliver: list[int], wheel: str = "second", now_ms: int = NOW) -> list[str]:
    topics = ["orders"] * len(deliver)
    sends = NewSends(topics, [b"b"] * len(deliver), deliver, [wheel] * len(deliver))
    return store.opened.send(sends, now_ms, sync=False).ids


def ack(store, ids: list[str], now_ms: int) -> Acked:
    return commit(store, store.opened.acker.stage_ack, [i.encode() for i in ids], now_ms)


def entries(store, family: str) -> dict[bytes, bytes]:
    return dict(store.families[family].items())


def state(store, message_id: str) -> State:
    return store.opened.reads.join.get(message_id).state


def seq_of(message_id: str) -> int:
    return parse_id(message_id).segment


def test_an_ack_call_is_one_entry_and_a_chunk_goes_with_its_last_ack(tmp_path):
    with open_v2(str(tmp_path / "s"), segment_max=4, retention_ms=RETENTION_MS) as store:
        ids = send(store, [NOW + 10 * i for i in range(6)])  # segments of 4 and 2
        (chunk,) = fire(store, NOW + 100).chunks
        assert ack(store, [ids[0], ids[4], ids[1]], NOW + 200) == Acked(3, [])
        (acked,) = entries(store, bk.CF_ACKED).values()
        refs = be.decode_refs(acked)
        assert refs.time_ms == NOW + 200
        assert list(zip(refs.segments, refs.indexes, strict=True)) == [
            (seq_of(i), parse_id(i).message_index) for i in (ids[0], ids[4], ids[1])
        ]
        assert list(entries(store, bk.CF_READY)) == [chunk.key]  # 3 of 6 still un-acked
        assert entries(store, bk.CF_SEGSTATE) == entries(store, bk.CF_EXPIRY) == {}
        assert [state(store, i) for i in ids] == [State.ACKED] * 2 + [State.FIRED] * 2 + [
            State.ACKED,
            State.FIRED,
        ]
        assert ack(store, [ids[5], ids[2], ids[3]], NOW + 300) == Acked(3, [])
        assert entries(store, bk.CF_READY) == {}
        segstates = entries(store, bk.CF_SEGSTATE)
        first, second = seq_of(ids[0]), seq_of(ids[4])
        assert {bk.segment_seq(k) for k in segstates} == {first, second}
        states, times = be.decode_segstate(segstates[bk.segment_key(first)])
        assert (bytes(states), list(times)) == (
            bytes([State.ACKED] * 4),
            [NOW + 200, NOW + 200, NOW + 300, NOW + 300],
        )
        assert set(entries(store, bk.CF_EXPIRY)) == {
            bk.expiry_key(NOW + 300 + RETENTION_MS, first),
            bk.expiry_key(NOW + 300 + RETENTION_MS, second),
        }
        assert entries(store, bk.CF_ACKED) == {}  # both named only terminal segments
        assert store.opened.life.segments == {} and store.opened.life.chunks == {}
        got = store.opened.reads.join.get(ids[2])
        assert (got.state, got.acked_at_ms) == (State.ACKED, NOW + 300)


def test_an_ack_entry_stays_while_a_segment_it_names_is_live(tmp_path):
    with open_v2(str(tmp_path / "s"), segment_max=2, retention_ms=RETENTION_MS) as store:
        ids = send(store, [NOW + 10, NOW + 20, NOW + 30, NOW + 40])  # segments of 2
        fire(store, NOW + 100)
        ack(store, [ids[0], ids[2]], NOW + 200)
        ack(store, [ids[1]], NOW + 210)  # the first segment turns terminal
        # the second call named only it and goes; the first names the live second segment
        assert [bk.segment_seq(k) for k in entries(store, bk.CF_ACKED)] == [1]
        assert state(store, ids[2]) is State.ACKED
        ack(store, [ids[3]], NOW + 220)
        assert entries(store, bk.CF_ACKED) == {}
        assert len(entries(store, bk.CF_SEGSTATE)) == 2


def test_ids_that_name_no_fired_message_are_refused(tmp_path):
    with open_v2(str(tmp_path / "s"), retention_ms=RETENTION_MS) as store:
        ids = send(store, [NOW + 10, NOW + 20, NOW + 5_000])
        fire(store, NOW + 100)
        forged = ids[0][:-1] + ("1" if ids[0].endswith("0") else "0")
        other_time = f"{parse_id(ids[0]).deliver_ms + 1:012x}" + ids[0][12:]
        unknown = ids[0][:12] + f"{99:010x}" + ids[0][22:]
        asked = ["not an id", forged, other_time, unknown, ids[2], ids[0], ids[0], ids[0].upper()]
        before = entries(store, bk.CF_META)
        assert ack(store, asked, NOW + 200) == Acked(1, [0, 1, 2, 3, 4, 6, 7])
        assert ack(store, [ids[0], forged], NOW + 300) == Acked(0, [0, 1])  # acked already
        assert len(entries(store, bk.CF_ACKED)) == 1  # a call that acks nothing writes nothing
        assert entries(store, bk.CF_META) == before
        assert [state(store, i) for i in ids] == [State.ACKED, State.FIRED, State.SCHEDULED]


def test_a_reopen_rebuilds_chunks_acks_and_terminal_messages(tmp_path):
    path = str(tmp_path / "s")
    with open_v2(path, segment_max=4, retention_ms=RETENTION_MS) as store:
        ids = send(store, [NOW + 10 * i for i in range(8)])  # segments of 4
        fire(store, NOW + 35)  # ids 0-3: one chunk
        fire(store, NOW + 100)  # ids 4-7: another
        ack(store, [ids[0], ids[4]], NOW + 110)
        overrides = store.opened.overrides
        commit(store, overrides.stage_cancel, ids[1], NOW + 120)
        commit(store, overrides.stage_move, ids[5], NOW + 1_500, "second")  # a Nack's delay
        before = store.opened.life
        memory = (
            {seq: (bytes(s.states), list(s.times), list(s.chunks), s.left, s.acks)
             for seq, s in before.segments.items()},
            before.chunks, before.acks, before.ack_seq,
        )  # fmt: skip
    with open_v2(path, segment_max=4, retention_ms=RETENTION_MS) as store:
        life = store.opened.life
        assert (
            {seq: (bytes(s.states), list(s.times), list(s.chunks), s.left, s.acks)
             for seq, s in life.segments.items()},
            life.chunks, life.acks, life.ack_seq,
        ) == memory  # fmt: skip
        assert ack(store, [ids[2], ids[3]], NOW + 200) == Acked(2, [])
        assert len(entries(store, bk.CF_READY)) == 1  # the first chunk went with its last ack
        assert ack(store, [ids[5]], NOW + 200).refused == [0]  # SCHEDULED again
        fire(store, NOW + 1_500)
        assert ack(store, [ids[5], ids[6], ids[7]], NOW + 1_600) == Acked(3, [])
        assert entries(store, bk.CF_READY) == entries(store, bk.CF_ACKED) == {}
        assert len(entries(store, bk.CF_SEGSTATE)) == 2
        assert store.opened.life.segments == {}
        assert ack(store, [ids[0]], NOW + 1_700).refused == [0]  # terminal: not in memory
        got = store.opened.reads.join.get(ids[1])
        assert (got.state, got.cancelled_at_ms) == (State.CANCELLED, NOW + 120)


def test_the_sweep_deletes_a_segment_its_state_and_what_its_overrides_left(tmp_path):
    with open_v2(str(tmp_path / "s"), segment_max=3, retention_ms=RETENTION_MS) as store:
        ids = send(store, [NOW + 10, NOW + 20, NOW + 30])
        far = send(store, [NOW + 40, NOW + 50, NOW + 7_200_000], wheel="hour")
        fire(store, NOW + 100)
        ack(store, ids, NOW + 110)
        commit(store, store.opened.overrides.stage_cancel, far[2], NOW + 120)
        ack(store, far[:2], NOW + 130)
        assert pairs_left(store) == {("hour", NOW + 7_200_000 - NOW % 3_600_000, 2)}
        assert len(entries(store, bk.CF_OVERRIDES)) == 1
        acker = store.opened.acker
        assert commit(store, acker.stage_sweep, NOW + 110 + RETENTION_MS - 1) == []
        swept = commit(store, acker.stage_sweep, NOW + 130 + RETENTION_MS, 1)
        assert swept == [1]  # at most one a call, in expiry order
        acker.swept(swept)
        assert list(entries(store, bk.CF_SEGMENTS)) == [bk.segment_key(2)]
        swept = commit(store, acker.stage_sweep, NOW + 130 + RETENTION_MS)
        acker.swept(swept)
        assert swept == [2]
        for family in (bk.CF_SEGMENTS, bk.CF_SEGSTATE, bk.CF_EXPIRY, bk.CF_OVERRIDES):
            assert entries(store, family) == {}, family
        assert pairs_left(store) == set()
        assert store.opened.firer.overrides_of(2) == {}
        assert store.opened.reads.join.get(far[2]) is None
        assert commit(store, acker.stage_sweep, NOW + 10 * RETENTION_MS) == []


def pairs_left(store) -> set[tuple[str, int, int]]:
    """(wheel, slot start, segment) of every wheel entry."""
    return {
        (wheel, *bk.decode_wheel_entry_key(key))
        for wheel, family in CF_WHEEL.items()
        for key in entries(store, family)
    }
