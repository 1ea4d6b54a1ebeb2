"""Cluster mode with TLS and tokens: nodes call each other over TLS (forwarding, fan-in,
scatter-gather), checking each other's certificate against `--cluster-ca` and presenting
their own (so mutual TLS admits them), and the caller's token rides on to the owner.
Real nodes over a real JetStream cluster on loopback. And a node that listens on every
interface must say where it is reached (`--advertise`)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.credentials import make_node_pki, write_tokens
from helpers.nats import NatsCluster
from helpers.serve_process import ServeProcess

from timerwheel.client import TimerClient
from timerwheel.cluster.partitions import partition_of
from timerwheel.common import State
from timerwheel.credentials import Tls

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]

TIMERWHEEL = str(Path(sys.executable).parent / "timerwheel")
PARTITIONS = 4
START_S = 90.0


def one_id_a_partition() -> list[str]:
    ids: dict[int, str] = {}
    n = 0
    while len(ids) < PARTITIONS:
        n += 1
        ids.setdefault(partition_of(f"tls-{n}", PARTITIONS), f"tls-{n}")
    return [ids[p] for p in range(PARTITIONS)]


def test_nodes_forward_fan_in_and_gather_over_mutual_tls_with_the_caller_s_token(tmp_path):
    ca, cert, key = make_node_pki(tmp_path)
    tokens = write_tokens(tmp_path / "tokens.toml")
    tls = ("--tls-cert", cert, "--tls-key", key, "--tls-client-ca", ca, "--cluster-ca", ca,
           "--auth-tokens", str(tmp_path / "tokens.toml"))  # fmt: skip
    client_tls = Tls(ca_file=ca, cert_file=cert, key_file=key)
    servers: list[ServeProcess] = []
    with NatsCluster(tmp_path / "nats") as nats:
        try:
            for name in ("n1", "n2"):
                servers.append(ServeProcess(
                    tmp_path / name, "--cluster", ",".join(nats.urls), "--node-name", name,
                    "--partitions", str(PARTITIONS), *tls, start_s=START_S,
                ))  # fmt: skip
            first, second = servers

            def owned() -> dict[str, list[int]]:
                found = {}
                for server in servers:
                    with TimerClient(server.target, tls=client_tls,
                                     token=tokens["admin"]) as client:  # fmt: skip
                        found[server.target] = sorted(client.stats().cluster.owned)
                return found

            def spread() -> bool:  # every partition owned, each node some
                now = owned()
                held = sorted(p for partitions in now.values() for p in partitions)
                return all(now.values()) and held == list(range(PARTITIONS))

            deadline = time.monotonic() + 60
            while not spread():
                assert time.monotonic() < deadline, f"partitions not spread: {owned()}"
                time.sleep(0.3)
            ids = one_id_a_partition()
            producer = TimerClient(first.target, tls=client_tls, token=tokens["producer"],
                                   routing=False)  # fmt: skip
            with producer:  # every id sent to n1: half of them forwarded to n2, over TLS
                for message_id in ids:
                    producer.send("orders", b"x", message_id=message_id, delay_ms="1h")
                soon = producer.send("orders", b"now", message_id="tls-soon", delay_ms=0)
            admin = TimerClient(second.target, tls=client_tls, token=tokens["admin"],
                                routing=False)  # fmt: skip
            with admin:  # asked of n2: the other half forwarded to n1
                assert [admin.get(i).state for i in ids] == [State.SCHEDULED] * PARTITIONS
                timers, _ = admin.list("orders", limit=100)  # gathered from both nodes
                assert {t.message_id for t in timers} >= set(ids)
            consumer = TimerClient(second.target, tls=client_tls, token=tokens["consumer"])
            with consumer:  # a stream on n2 gets what fires on either node
                with consumer.subscribe("orders", max_in_flight=10) as stream:
                    batch = next(iter(stream))
                assert soon.message_id in [d.message_id for d in batch]
        finally:
            for server in servers:
                server.kill()


def test_a_wildcard_host_without_advertise_is_refused_before_it_starts(tmp_path):
    done = subprocess.run(
        [TIMERWHEEL, "serve", "--cluster", "nats://127.0.0.1:1", "--node-name", "n1",
         "--host", "0.0.0.0", "--insecure", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--advertise" in done.stderr and "0.0.0.0" in done.stderr
