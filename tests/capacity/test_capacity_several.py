"""Several exports' manifests combined for one report (timerwheel.capacity.several), on
made-up manifests: totals summed, disks summed only when every node's is known."""

from __future__ import annotations

import pytest

from timerwheel.capacity.several import SeveralRefused, check_distinct, combined_manifest


def manifest(rows: int, free: int | None, cut: int) -> dict:
    families = {"messages": {"rows": rows, "files": 1, "bytes": 10 * rows, "wheel": None}}
    return {
        "format": "x", "cut_at_ms": cut, "service_now_ms": cut + 1, "source": f"/d{rows}",
        "totals": {"rows": rows, "files": 1, "bytes": 10 * rows, "families": families},
        "data_dir_disk": {"free_bytes": free, "total_bytes": 100, "store_bytes": rows},
        "files": [{"file": "a.sst"}],
    }  # fmt: skip


def test_totals_and_disks_are_summed_and_the_earliest_cut_kept():
    both = combined_manifest([manifest(3, 50, 2_000), manifest(4, 60, 1_000)])
    assert both["totals"]["rows"] == 7 and both["totals"]["bytes"] == 70
    assert both["totals"]["families"]["messages"]["bytes"] == 70
    assert both["data_dir_disk"] == {"free_bytes": 110, "total_bytes": 200, "store_bytes": 7}
    assert (both["cut_at_ms"], both["service_now_ms"], both["exports"]) == (1_000, 1_001, 2)
    assert both["source"] == "/d3, /d4"


def test_an_unknown_disk_makes_the_sum_unknown_and_one_manifest_stays_as_it_is():
    both = combined_manifest([manifest(3, None, 2_000), manifest(4, 60, 1_000)])
    assert both["data_dir_disk"]["free_bytes"] is None
    one = manifest(3, 50, 2_000)
    assert combined_manifest([one]) is one


def test_the_same_folder_twice_is_refused(tmp_path):
    check_distinct([str(tmp_path / "a"), str(tmp_path / "b")])
    with pytest.raises(SeveralRefused, match="twice"):
        check_distinct([str(tmp_path / "a"), str(tmp_path / "x" / ".." / "a")])
