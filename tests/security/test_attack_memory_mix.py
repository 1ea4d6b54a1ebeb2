"""The worst concurrent mix of issue 76 against a real `timerwheel serve` with tokens.

Issue 76 took a server past its 1 GiB promise with 48 concurrent SendBatch calls of
15 MiB (1,082 MiB: the byte budget was checked after grpcio had read and decoded each
request) and with 16 concurrent List calls with bodies over 4 MiB bodies (1,389 MiB: List
read its page before it checked). Here all of it runs at once, with Nacks of 15 MiB of
ids, Gets of 4 MiB bodies, health Checks without a token naming a 15 MiB service and
hundreds of idle Subscribe streams beside, while a client
with another token sends and gets small messages and a consumer with a third token waits
for one. The server's peak RSS (the kernel's high-water mark, VmHWM, so no moment between
samples is missed) is printed and must stay under the budget of docs/security.md
("Memory budget"); every call of the clients with other tokens must be served, and their
P99 is printed beside the same calls' P99 before the attack, measured first, and must be
well under the attack's length (issue 76: 2-8 s, calls queued behind the attack's).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers.credentials import write_tokens
from helpers.waits import WAIT_S

from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

# system: a real `timerwheel serve` taken to its memory limits
pytestmark = [pytest.mark.system, pytest.mark.wallclock]

MEMORY_BUDGET_BYTES = 1024**3  # docs/security.md, "Memory budget": default settings
MIB = 1024 * 1024
OK = grpc.StatusCode.OK
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
INVALID = grpc.StatusCode.INVALID_ARGUMENT

BATCHES = 48  # concurrent SendBatch calls of 15 MiB (issue 76: 1,082 MiB)
LISTS = 16  # concurrent List calls with bodies over 4 MiB bodies (issue 76: 1,389 MiB)
NACKS = 8  # concurrent Nacks of 15 MiB of ids
GETS = 16  # concurrent Gets of a 4 MiB body
PROBES = 16  # concurrent health Checks without a token, each naming a 15 MiB service
IDLE_STREAMS = 300  # idle Subscribe streams of one token over 10 connections
ROUNDS = 2  # each attacker repeats its call
LIGHT_CALLER = Path(__file__).parents[1] / "helpers" / "light_caller_child.py"
PAIRS = 50  # another token's Send+Get pairs, before the attack and at least as many in it
BODY = 4 * MIB - 64 * 1024  # the largest body that fits max_body_bytes with room to spare


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set (VmHWM in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


class Caller:
    """Stubs on a TCP connection of their own, every call with `token`."""

    def __init__(self, target: str, token: str) -> None:
        self.channel = grpc.insecure_channel(
            target,
            [
                ("grpc.use_local_subchannel_pool", 1),
                ("grpc.max_send_message_length", -1),
                ("grpc.max_receive_message_length", -1),
            ],
        )
        self.service = pb_grpc.TimerServiceStub(self.channel)
        self.metadata = (("authorization", f"Bearer {token}"),)

    def code(self, method: str, request, timeout_s: float = WAIT_S * 6) -> grpc.StatusCode:
        try:
            getattr(self.service, method)(request, metadata=self.metadata, timeout=timeout_s)
        except grpc.RpcError as error:
            return error.code()
        return OK

    def close(self) -> None:
        self.channel.close()


def big_batch(tag: str) -> pb.SendBatchRequest:
    """15 MiB: four bodies of almost 4 MiB, each with an id of its own."""
    body = bytes([len(tag) % 251]) * BODY
    return pb.SendBatchRequest(
        messages=[
            pb.SendRequest(topic="big", body=body, delay_ms=3_600_000, message_id=f"{tag}-{i}")
            for i in range(4)
        ]
    )


def p99_ms(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


def test_the_worst_concurrent_mix_stays_in_the_memory_budget_and_others_are_served(
    tmp_path, serve_process
):
    tokens = write_tokens(tmp_path / "tokens.toml")
    server = serve_process(tmp_path / "data", "--auth-tokens", str(tmp_path / "tokens.toml"))
    pid = server.proc.pid
    producers = [Caller(server.target, tokens["producer"]) for _ in range(8)]
    consumers = [Caller(server.target, tokens["consumer"]) for _ in range(10)]
    admin = Caller(server.target, tokens["admin"])
    orders = Caller(server.target, tokens["orders-consumer"])
    callers = [*producers, *consumers, admin, orders]
    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_send_message_length", -1)]
    anonymous = [grpc.insecure_channel(server.target, options) for _ in range(8)]
    idle: list = []
    children: list[subprocess.Popen] = []
    try:
        # What List reads: a dozen bodies of almost 4 MiB, due in an hour.
        for index in range(12):
            request = pb.SendRequest(
                topic="big", body=b"\x5a" * BODY, delay_ms=3_600_000, message_id=f"seed-{index}"
            )
            assert producers[0].code("Send", request) is OK
        print(f"\npeak RSS before the attack: {peak_rss_bytes(pid) / MIB:.0f} MiB")

        # Idle streams of one token over 10 connections: 64 admitted, the rest refused.
        ended: Counter[grpc.StatusCode] = Counter()
        ended_cond = threading.Condition()

        def stream_ended(call) -> None:
            with ended_cond:
                ended[call.code()] += 1
                ended_cond.notify_all()

        for index in range(IDLE_STREAMS):
            caller = consumers[index % len(consumers)]
            call = caller.service.Subscribe(
                pb.SubscribeRequest(topic=f"idle{index % 7}"), metadata=caller.metadata
            )
            call.add_done_callback(stream_ended)
            idle.append(call)
        with ended_cond:
            assert ended_cond.wait_for(lambda: ended[EXHAUSTED] >= IDLE_STREAMS - 64, WAIT_S)

        # A consumer with another token waits for its message through the attack.
        stream = orders.service.Subscribe(
            pb.SubscribeRequest(topic="orders.eu"), metadata=orders.metadata
        )
        idle.append(stream)  # cancelled at the end too
        got: list[pb.Delivery] = []

        def consume() -> None:
            try:
                for batch in stream:
                    got.extend(batch.deliveries)
                    if got:
                        return
            except grpc.RpcError:
                return  # asserted on below: got stays empty

        consumer_thread = threading.Thread(target=consume, daemon=True)
        consumer_thread.start()

        codes: dict[str, Counter[grpc.StatusCode]] = {
            "SendBatch": Counter(), "List": Counter(), "Nack": Counter(), "Get": Counter(),
            "Health.Check without a token": Counter(),
        }  # fmt: skip
        refused_batches: list[str] = []
        lock = threading.Lock()
        start = threading.Barrier(BATCHES + LISTS + NACKS + GETS + PROBES + 1)
        nack_ids = [f"no-such-delivery-{i:012d}" for i in range(15 * MIB // 32)]

        def send_batches(index: int) -> None:
            caller = producers[index % len(producers)]
            batches = [big_batch(f"b{index}r{r}") for r in range(ROUNDS)]
            start.wait()
            for round_, batch in enumerate(batches):
                code = caller.code("SendBatch", batch)
                with lock:
                    codes["SendBatch"][code] += 1
                    if code is not OK:
                        refused_batches.append(f"b{index}r{round_}-0")

        def lists(index: int) -> None:
            caller = producers[index % len(producers)]
            request = pb.ListRequest(topic="big", limit=1_000, include_body=True)
            start.wait()
            for _ in range(ROUNDS):
                code = caller.code("List", request)
                with lock:
                    codes["List"][code] += 1

        def nacks(index: int) -> None:
            caller = consumers[index % len(consumers)]
            request = pb.NackRequest(topic="idle0", message_ids=nack_ids)
            start.wait()
            for _ in range(ROUNDS):
                code = caller.code("Nack", request)
                with lock:
                    codes["Nack"][code] += 1

        def gets(index: int) -> None:
            caller = producers[index % len(producers)]
            request = pb.GetRequest(message_id=f"seed-{index % 12}", include_body=True)
            start.wait()
            for _ in range(ROUNDS):
                code = caller.code("Get", request)
                with lock:
                    codes["Get"][code] += 1

        def probes(index: int) -> None:
            health = health_pb2_grpc.HealthStub(anonymous[index % len(anonymous)])
            request = health_pb2.HealthCheckRequest(service="s" * (15 * MIB))
            start.wait()
            for _ in range(ROUNDS):
                try:
                    health.Check(request, timeout=WAIT_S * 6)
                    code = OK
                except grpc.RpcError as error:
                    code = error.code()
                with lock:
                    codes["Health.Check without a token"][code] += 1

        # Another token's small Send and Get, one after the other, from a process of its
        # own: its figures are the server's answers, not this process's wait for its GIL.
        light_caller = subprocess.Popen(
            [sys.executable, str(LIGHT_CALLER), server.target, tokens["admin"]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        children.append(light_caller)
        light: Counter[grpc.StatusCode] = Counter()

        def send_and_get(tag: str) -> float:
            """Seconds the pair took, as the other process measured it."""
            assert light_caller.stdin is not None and light_caller.stdout is not None
            light_caller.stdin.write(tag + "\n")
            light_caller.stdin.flush()
            sent, got, ms = light_caller.stdout.readline().split()
            light[grpc.StatusCode[sent]] += 1
            light[grpc.StatusCode[got]] += 1
            return float(ms) / 1000

        # The same calls before the attack: what "served" means on this machine now.
        baseline = [send_and_get(f"quiet-{index}") for index in range(PAIRS)]

        attackers = [
            *(threading.Thread(target=send_batches, args=(i,)) for i in range(BATCHES)),
            *(threading.Thread(target=lists, args=(i,)) for i in range(LISTS)),
            *(threading.Thread(target=nacks, args=(i,)) for i in range(NACKS)),
            *(threading.Thread(target=gets, args=(i,)) for i in range(GETS)),
            *(threading.Thread(target=probes, args=(i,)) for i in range(PROBES)),
        ]
        for thread in attackers:
            thread.start()
        start.wait()
        attack_began = time.perf_counter()

        # Meanwhile another token sends and reads back small messages, one at a time.
        latencies: list[float] = []
        attack_s = 0.0
        while any(thread.is_alive() for thread in attackers) or len(latencies) < PAIRS:
            latencies.append(send_and_get(f"light-{len(latencies)}"))
            if not attack_s and not any(thread.is_alive() for thread in attackers):
                attack_s = time.perf_counter() - attack_began
        sent = pb.SendRequest(topic="orders.eu", body=b"pay #42", delay_ms=0)
        assert admin.code("Send", sent, WAIT_S) is OK
        for thread in attackers:
            thread.join(WAIT_S * 6)
        consumer_thread.join(WAIT_S)
        peak = peak_rss_bytes(pid)
        for method, counts in codes.items():
            print(f"{method}: {', '.join(f'{n} {code.name}' for code, n in counts.items())}")
        print(f"idle streams ended: {', '.join(f'{n} {c.name}' for c, n in ended.items())}")
        print(
            f"another token's Send+Get pairs: {len(latencies)} under attack, "
            f"{', '.join(f'{n} {code.name}' for code, n in light.items())}, "
            f"P99 {p99_ms(latencies):.0f} ms (before the attack: {len(baseline)} pairs, "
            f"P99 {p99_ms(baseline):.0f} ms); the attack took {attack_s:.1f} s"
        )
        print(f"server peak RSS: {peak / MIB:.0f} MiB (budget {MEMORY_BUDGET_BYTES // MIB} MiB)")

        assert sum(codes["SendBatch"].values()) == BATCHES * ROUNDS
        assert set(codes["SendBatch"]) <= {OK, EXHAUSTED} and OK in codes["SendBatch"]
        assert set(codes["List"]) <= {OK, EXHAUSTED} and OK in codes["List"]
        assert set(codes["Nack"]) <= {INVALID, EXHAUSTED}, codes["Nack"]
        assert set(codes["Get"]) <= {OK, EXHAUSTED} and OK in codes["Get"]
        assert set(codes["Health.Check without a token"]) <= {INVALID, EXHAUSTED}
        assert set(light) == {OK}, light
        # Served in turn: its calls wait for a thread to come free and for their turn at a
        # place to read, never behind the attack's queue of calls (timerwheel.security
        # .fair_pool, ReceiveGate). What is left is sharing the cores with the attack
        # (grpcio's poller and every handler need the GIL, the writer commits 15 MiB
        # batches): a pair takes a hundred times its quiet time on a loaded machine, but
        # not a large part of the attack, as calls stuck behind its queue did.
        assert p99_ms(latencies) < max(attack_s * 1000 / 2, 100 * p99_ms(baseline)), (
            f"P99 {p99_ms(latencies):.0f} ms under an attack of {attack_s:.1f} s"
        )
        assert [d.body for d in got] == [b"pay #42"]
        for message_id in refused_batches:  # a refused batch stored nothing
            code = admin.code("Get", pb.GetRequest(message_id=message_id, include_body=False))
            assert code is grpc.StatusCode.NOT_FOUND, message_id
        assert peak < MEMORY_BUDGET_BYTES, f"peak RSS {peak / MIB:.0f} MiB"
    finally:
        for child in children:
            if child.stdin is not None:
                child.stdin.close()  # its loop ends at the end of its input
            child.wait(WAIT_S)
        for call in idle:
            call.cancel()
        for caller in callers:
            caller.close()
        for channel in anonymous:
            channel.close()
