"""The fire's bookkeeping, the Ack and the sweep of a version-2 store (decision 0014,
step 4), over the memory of its live segments (`timerwheel.store.segment_life`).

One writer for the product and the tests (`tests/helpers/batch_v2.py` and the layout
prototype go through it). What each stages into a group commit:

- **`stage_fire`**: the product's fire (`SegmentFirer.stage`), then each fired message's
  fire chunk in memory, so that the Ack can retire it.
- **`stage_ack`**: one `acked` entry an Ack call (its time and the (segment, index) pairs
  it retired), the `ready` entry of each fire chunk whose last message it retired, and
  for each segment whose last message it turned terminal, `segstate` and `expiry` (and
  the Ack entries that then name only terminal segments are deleted). An id is acked
  when it names a FIRED message of a live segment, random part and deliver time
  included (it is compared with the segment's own id); the others are refused: not an
  id, unknown, swept, forged, not FIRED, or repeated in the call. An id that is not a
  server-made one is looked up in `ids` (a cold path: the 32-hex ids of a version-1
  store, which the upgrade keeps as client ids, `timerwheel.store.segment_upgrade`).
- **`stage_sweep`**: every segment whose `expiry` has come (at most `limit` a call): its
  `segments`, `segstate` and `expiry` entries, its overrides, and the wheel entries still
  holding the places its overrides name (a Cancel of a far-future message leaves its
  pair; the pair a Reschedule moved away from is found from the segment's column). A pair
  left by a message moved twice is not found here: the fire passes it over and deletes
  its entry once the cursor passes it. After the commit, `swept` tells the firer
  (`SegmentFirer.forget`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import islice
from typing import Any, NamedTuple

from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store import keys
from timerwheel.store.batch import StagedBatch
from timerwheel.store.segment_fire import Fired, SegmentFirer
from timerwheel.store.segment_ids import id_places, parse_id
from timerwheel.store.segment_life import _ACKED, LiveSegments
from timerwheel.store.segment_send import SLOT_MS
from timerwheel.store.segments import SegmentView
from timerwheel.store.timer_reads import TimerReads

SWEEP_MAX = 64  # segments a sweep call: each stands for up to `segment_max` messages


class Acked(NamedTuple):
    acked: int  # messages the call acked
    refused: list[int]  # positions of the ids it did not ack


class SegmentAcker:
    """Stages the fire's bookkeeping, the Ack and the sweep of a version-2 store, over its
    families by name. For the one writer thread, which commits every batch it stages."""

    def __init__(
        self, families: Mapping[str, Any], firer: SegmentFirer, life: LiveSegments
    ) -> None:
        self._cf, self.firer, self.life = families, firer, life

    def stage_fire(self, batch: StagedBatch, now_ms: int, limit: int) -> Fired:
        """`SegmentFirer.stage`, and the fired messages' chunks kept for their Ack."""
        fired = self.firer.stage(batch, now_ms, limit)
        if fired.chunks:
            self.life.fired(batch, fired.chunks)
        return fired

    def stage_ack(self, batch: StagedBatch, message_ids: Sequence[bytes], now_ms: int) -> Acked:
        """One Ack call of server-made ids (ASCII), or of ids an `ids` entry names (a
        version-1 id an upgrade brought in): what it acks is staged into `batch`."""
        life = self.life
        segs, idxs, refused = _places(message_ids)
        by_client = self._client_places(batch, message_ids, segs, idxs, refused)
        live = life.segments
        ack = life.ack_seq + 1
        acked_segs: list[int] = []
        acked_idxs: list[int] = []
        done = []
        last, segment, ids = -1, None, None
        for position, (message_id, seq, index) in enumerate(
            zip(message_ids, segs, idxs, strict=True)
        ):
            if seq != last:
                last, segment = seq, live.get(seq)
                ids = None if segment is None else life.ids(seq, batch=batch)
            if (
                segment is None
                or index >= len(ids)  # type: ignore[arg-type]
                or (ids[index] != message_id and position not in by_client)  # type: ignore[index]
                or segment.states[index]
                or not segment.chunks[index]
            ):
                if seq >= 0:
                    refused.append(position)
                continue
            acked_segs.append(seq)
            acked_idxs.append(index)
            life.retire(batch, segment, index)
            segment.states[index], segment.times[index] = _ACKED, now_ms
            segment.left -= 1
            if not segment.left:
                done.append((seq, segment))
        if not acked_segs:
            refused.sort()
            return Acked(0, refused)
        writes = batch.writes
        writes[bk.CF_ACKED][bk.acked_key(ack)] = be.refs_entry(now_ms, acked_segs, acked_idxs)
        life.ack_seq = ack
        named = set(acked_segs)
        life.acks[ack] = len(named)
        for seq in named:
            live[seq].acks.add(ack)
        for seq, segment in done:
            life.close(batch, seq, segment, now_ms)  # type: ignore[arg-type]
        if refused:
            refused.sort()
        return Acked(len(acked_segs), refused)

    def _client_places(
        self, batch: StagedBatch, message_ids: Sequence[bytes], segs: Any, idxs: Any,
        refused: list[int],
    ) -> set[int]:  # fmt: skip
        """The cold path: ids that are not server-made (a version-1 id an upgrade brought
        in, kept as a client id) found through `ids`; their positions, taken out of
        `refused` (`segs` and `idxs` are lists then)."""
        if not refused:
            return set()
        staged, family = batch.writes[bk.CF_IDS], self._cf[bk.CF_IDS]
        found = set()
        for position in refused:
            key = message_ids[position]
            place = staged[key] if key in staged else family.get(key)
            if place is not None:
                segs[position], idxs[position] = be.decode_place(place)
                found.add(position)
        refused[:] = [position for position in refused if position not in found]
        return found

    def stage_sweep(self, batch: StagedBatch, now_ms: int, limit: int = SWEEP_MAX) -> list[int]:
        """Sweep at most `limit` segments whose expiry has come by `now_ms`; their seqs,
        for `swept` once the batch is committed."""
        if limit < 1:
            raise ValueError(f"a sweep of at most {limit} segments")
        due = list(
            islice(TimerReads._range(self._cf[bk.CF_EXPIRY], b"", bk.slot_bound(now_ms + 1)), limit)
        )
        writes = batch.writes
        seqs = []
        for key, _ in due:
            seq = bk.decode_expiry_key(key)[1]
            seqs.append(seq)
            writes[bk.CF_EXPIRY][key] = None
            segment_key = bk.segment_key(seq)
            writes[bk.CF_SEGSTATE][segment_key] = None
            overrides = self.firer.overrides_of(seq)
            if overrides:
                self._stage_strays(batch, seq, overrides)
            writes[bk.CF_SEGMENTS][segment_key] = None
        return seqs

    def swept(self, seqs: list[int]) -> None:
        """The sweep that staged `seqs` is committed: the firer forgets them."""
        for seq in seqs:
            self.firer.forget(seq)

    def _stage_strays(
        self, batch: StagedBatch, seq: int, overrides: dict[int, be.Override]
    ) -> None:
        """A swept segment's overrides, and the wheel entries holding the places they name
        or moved their messages from."""
        writes = batch.writes
        raw = self._cf[bk.CF_SEGMENTS].get(bk.segment_key(seq))
        view = None if raw is None else SegmentView(raw)
        times = set()
        for index, override in overrides.items():
            writes[bk.CF_OVERRIDES][bk.place_key(seq, index)] = None
            if override.deliver_ms is not None:
                times.add(override.deliver_ms)
            if view is not None:
                times.add(view.deliver_ms(index))
        for wheel, slot_ms in SLOT_MS.items():
            family = keys.CF_WHEEL[wheel]
            staged = writes[family]
            for key in {bk.wheel_entry_key(t - t % slot_ms, seq) for t in times}:
                present = staged[key] if key in staged else self._cf[family].get(key)
                if present is not None:
                    staged[key] = None


def _places(message_ids: Sequence[bytes]) -> tuple[Sequence[int], Sequence[int], list[int]]:
    """The (segment, index) columns of the ids, column-wise (`id_places`); an id that is
    not a server-made one gets segment -1 and its position is in the list."""
    try:
        segs, idxs = id_places(message_ids)  # type: ignore[arg-type]
        return segs, idxs, []
    except ValueError:
        pass
    segs_list, idxs_list, refused = [], [], []
    for position, message_id in enumerate(message_ids):
        try:
            parsed = parse_id(message_id)
        except ValueError:
            segs_list.append(-1)
            idxs_list.append(0)
            refused.append(position)
            continue
        segs_list.append(parsed.segment)
        idxs_list.append(parsed.message_index)
    return segs_list, idxs_list, refused
