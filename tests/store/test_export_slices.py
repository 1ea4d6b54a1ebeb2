"""timerwheel.store.export_slices: the wheels merged run by run, and SST files written a run at a
time.

Plain iterators for the merge; real SST files in a tmp dir, read back with RocksDB."""

from __future__ import annotations

import itertools
import os
import random

from hypothesis import given
from hypothesis import strategies as st

from timerwheel.store.export_files import SstSink, read_sst
from timerwheel.store.export_slices import merge_runs


def _rows(keys: list[bytes]) -> list[tuple[bytes, bytes]]:
    return [(key, b"v" + key) for key in sorted(keys)]


def _merged(families: dict[str, list[tuple[bytes, bytes]]]) -> list[tuple[str, list]]:
    """Read every run to its end, as the export does; (family, rows) of each run."""
    return [(family, list(run)) for family, run in merge_runs(
        {family: iter(rows) for family, rows in families.items()}
    )]  # fmt: skip


@given(
    st.lists(st.binary(min_size=1, max_size=6), unique=True, max_size=60),
    st.lists(st.integers(0, 2), max_size=60),
)
def test_runs_are_every_row_once_in_key_order_each_from_its_own_family(keys, owners):
    families: dict[str, list] = {"hour": [], "minute": [], "second": []}
    names = list(families)
    for index, key in enumerate(keys):  # a key is in one family only, as wheel keys are
        families[names[owners[index] if index < len(owners) else 0]].append(key)
    families = {name: _rows(members) for name, members in families.items()}
    runs = _merged(families)
    merged = [row for _, rows in runs for row in rows]
    assert merged == _rows(keys)
    for family, rows in runs:
        assert rows and all(row in families[family] for row in rows)
    # A run ends only where another family's row comes next: consecutive runs differ.
    assert all(a[0] != b[0] for a, b in itertools.pairwise(runs))


def test_disjoint_families_are_one_run_each():
    families = {
        "hour": _rows([b"\x03" + bytes([i]) for i in range(50)]),
        "minute": _rows([b"\x02" + bytes([i]) for i in range(50)]),
        "second": _rows([b"\x01" + bytes([i]) for i in range(50)]),
        "empty": [],
    }
    runs = _merged(families)
    assert [(family, len(rows)) for family, rows in runs] == [
        ("second", 50), ("minute", 50), ("hour", 50),
    ]  # fmt: skip


def test_put_rows_takes_at_most_its_limit_and_leaves_the_rest(tmp_path):
    rows = iter(_rows([i.to_bytes(4, "big") for i in range(1_000)]))
    first = SstSink(str(tmp_path), "a.sst", "wheel_hour", 0, 0)
    assert first.put_rows(rows, 0) == 0
    assert first.put_rows(rows, 300) == 300
    assert first.put_rows(rows, 200) == 200  # an open file takes more
    second = SstSink(str(tmp_path), "b.sst", "wheel_hour", 1, 0)
    assert second.put_rows(rows, 10_000) == 500  # the rest: fewer than the limit
    assert second.put_rows(rows, 10) == 0
    for sink, expected in ((first, range(500)), (second, range(500, 1_000))):
        entry = sink.finish()
        assert entry["rows"] == len(expected) == sink.rows
        assert sink.first_key == expected[0].to_bytes(4, "big")
        assert sink.last_key == expected[-1].to_bytes(4, "big")
        got = list(read_sst(os.path.join(tmp_path, entry["file"]), str(tmp_path)))
        assert got == _rows([i.to_bytes(4, "big") for i in expected])


def test_put_rows_of_an_empty_iterator_leaves_no_file(tmp_path):
    sink = SstSink(str(tmp_path), "none.sst", "wheel_hour", 0, 0)
    assert sink.put_rows(iter([]), 5) == 0
    assert sink.finish() is None
    assert not os.path.exists(tmp_path / "none.sst")


def test_long_interleaved_families_merge_like_a_sort():
    rng = random.Random(7)
    keys = rng.sample(range(10**6), 20_000)
    families = {name: [] for name in ("hour", "minute", "second")}
    for key in keys:  # mostly runs of a few hundred, as a cascade in progress leaves them
        families[("hour", "minute", "second")[(key // 300) % 3]].append(key.to_bytes(4, "big"))
    runs = _merged({name: _rows(members) for name, members in families.items()})
    assert [row for _, rows in runs for row in rows] == _rows([k.to_bytes(4, "big") for k in keys])
