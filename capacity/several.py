"""Several exports read as one: the parts a cluster's nodes wrote of one Export (each
node's own partitions, on its own machine: docs/cluster.md, "Whole-cluster Export").

The nodes' folders hold disjoint timers (a timer lives in one partition, and a partition
is in one node's part), so their rows are read as one data set (the union of the data
source over each folder) and their manifests are combined here for the report's storage
and headroom figures: the totals summed, the disks of the nodes' data dirs summed (the
headroom then assumes the load keeps spreading over the nodes as the stored timers do;
a report of one node's folder gives that node's own), the earliest cut.
"""

from __future__ import annotations

import os


class SeveralRefused(ValueError):
    """The inputs cannot be read as one; the message names the input."""


def check_distinct(inputs: list[str]) -> None:
    """The same folder given twice would count its timers twice."""
    seen: set[str] = set()
    for given in inputs:
        key = os.path.realpath(given) if "://" not in given else given.rstrip("/")
        if key in seen:
            raise SeveralRefused(f"--input {given!r} is given twice: its timers would count twice")
        seen.add(key)


def combined_manifest(manifests: list[dict]) -> dict:
    """One manifest for the report's figures from the nodes' manifests (the first's
    layout and format; the files stay in each folder's own manifest)."""
    if len(manifests) == 1:
        return manifests[0]
    first = manifests[0]
    families: dict[str, dict] = {}
    for manifest in manifests:
        for family, figures in manifest["totals"]["families"].items():
            into = families.setdefault(family, {**figures, "rows": 0, "files": 0, "bytes": 0})
            for key in ("rows", "files", "bytes"):
                into[key] += figures[key]
    totals = {key: sum(m["totals"][key] for m in manifests) for key in ("rows", "files", "bytes")}
    disks = [m.get("data_dir_disk") or {} for m in manifests]

    def summed(key: str) -> int | None:
        values = [disk.get(key) for disk in disks]
        return None if any(v is None for v in values) else sum(values)

    nows = [m["service_now_ms"] for m in manifests if m.get("service_now_ms") is not None]
    return {
        **first,
        "totals": {**totals, "families": families},
        "data_dir_disk": {k: summed(k) for k in ("free_bytes", "total_bytes", "store_bytes")},
        "cut_at_ms": min(m["cut_at_ms"] for m in manifests),
        "service_now_ms": min(nows) if nows else None,
        "source": ", ".join(str(m.get("source", "")) for m in manifests),
        "files": [],  # each folder's files are in its own manifest
        "exports": len(manifests),
    }
