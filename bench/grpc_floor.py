"""What a unary Send costs grpcio itself on this machine: a server that stores nothing.

    python -m bench.grpc_floor --servers 1
    python -m bench.grpc_floor --servers 2

The upper bound of `timerwheel loadtest --scenario tdmq --batch 1 ... --connections 4`:
`--servers` processes share one loopback port (SO_REUSEPORT, as `serve --workers`
does), each a grpcio server built as timerwheel's is (a thread pool of 32 for unary
calls, health answers that name the worker so a client spreads its connections), whose
`TimerService.Send` answers at once without storing, firing or delivering anything. The
load is the harness's own: `--producers` processes, each running `timerwheel.loadtest.producer`'s
send loop (unary futures, open loop at `--rate` in all, `--max-outstanding` unanswered
at most, `--connections` per process). So what it prints (one JSON line: calls answered
a second, and the CPU a call of the servers and of the producers, from each process's
rusage) is what grpcio and the harness cost alone on the same cores; a timerwheel
server can only add to it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health_pb2_grpc

from timerwheel.client import TimerClient
from timerwheel.loadtest.pacing import use_measuring_switch_interval
from timerwheel.loadtest.producer import Producer, ProducerPlan
from timerwheel.server.worker_health import WorkerHealth
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

UNARY_THREADS = 32  # timerwheel's `grpc_workers` default
STOP_TIMEOUT_S = 10


class InstantSend(pb_grpc.TimerServiceServicer):
    """Answers every Send at once: an id and the time asked for, nothing stored."""

    def Send(self, request, context):
        return pb.SendResponse(message_id="floor", deliver_at_ms=request.deliver_at_ms)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(port: int, index: int, count: int, ready, stop, cpu) -> None:
    """One server process, until `stop` is set; its CPU seconds go into `cpu[index]`."""
    use_measuring_switch_interval()
    server = grpc.server(ThreadPoolExecutor(UNARY_THREADS), options=[("grpc.so_reuseport", 1)])
    pb_grpc.add_TimerServiceServicer_to_server(InstantSend(), server)
    health_pb2_grpc.add_HealthServicer_to_server(WorkerHealth(index, count), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    started_s = cpu_s()  # the start-up's imports are not a call's
    ready.release()
    stop.wait(timeout=3600)
    cpu[index] = cpu_s() - started_s
    server.stop(grace=None)


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def produce(plan: ProducerPlan, start: float, stop, results) -> None:
    """One producer process: the harness's send loop against the floor servers."""
    use_measuring_switch_interval()
    client = TimerClient(plan.target, timeout_s=plan.rpc_timeout_s, connections=plan.connections)
    try:
        client.wait_ready(timeout_s=30)
        producer = Producer(plan, client)
        start_ns = time.monotonic_ns() + int((start - time.time()) * 1e9)
        started_s = cpu_s()
        producer.run(start_ns, int(start * 1000), stop, lambda sent: None)
        sent = producer.result()["sent"]
        results.put({"sent": sent, "cpu_s": cpu_s() - started_s, "at": time.time()})
    except Exception as exc:  # the parent fails the run with it, instead of waiting
        results.put({"error": repr(exc)})
    finally:
        client.close()


def measure(args) -> dict:
    """Start the servers, run the producers for `--duration`, stop everything."""
    load_before = os.getloadavg()
    ctx = multiprocessing.get_context("spawn")
    port, stop, ready = free_port(), ctx.Event(), ctx.Semaphore(0)
    cpu, results = ctx.Array("d", args.servers), ctx.Queue()
    servers = [
        ctx.Process(target=serve, args=(port, i, args.servers, ready, stop, cpu), daemon=True)
        for i in range(args.servers)
    ]
    producers = []
    try:
        for process in servers:
            process.start()
        for _ in servers:
            if not ready.acquire(timeout=30):
                raise RuntimeError("a floor server did not start within 30 s")
        start = time.time() + 3  # time for the producers to connect and spread
        messages = int(args.rate * args.duration)
        plans = [_plan(args, i, f"127.0.0.1:{port}", messages) for i in range(args.producers)]
        aborts = [ctx.Event() for _ in plans]  # never set: each runs its whole schedule
        producers = [
            ctx.Process(target=produce, args=(plan, start, abort, results), daemon=True)
            for plan, abort in zip(plans, aborts, strict=True)
        ]
        for process in producers:
            process.start()
        answers = [results.get(timeout=args.duration + 60) for _ in producers]
        failed = [answer["error"] for answer in answers if "error" in answer]
        if failed:
            raise RuntimeError(f"a producer failed: {failed[0]}")
        ended = max(answer["at"] for answer in answers)
    finally:
        stop.set()
        for process in [*producers, *servers]:
            process.join(timeout=STOP_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()
    sent = sum(answer["sent"] for answer in answers)
    return {
        "bench": "grpc_floor",
        "servers": args.servers,
        "producers": args.producers,
        "connections": args.connections,
        "rate_offered": args.rate,
        "calls": sent,
        "calls_per_s": round(sent / max(ended - start, 1e-9)),
        "server_cpu_us_per_call": round(sum(cpu) / max(sent, 1) * 1e6, 1),
        "producer_cpu_us_per_call": round(
            sum(answer["cpu_s"] for answer in answers) / max(sent, 1) * 1e6, 1
        ),
        "load_before": load_before,
    }


def _plan(args, index: int, target: str, messages: int) -> ProducerPlan:
    share = messages // args.producers + (index < messages % args.producers)
    return ProducerPlan(
        index=index, producers=args.producers, target=target, messages=share,
        rate=args.rate, batch=1, topics=("floor",), body_bytes=args.body_bytes,
        delay_ms=(3_000, 60_000), burst_offset_ms=0, burst_window_ms=0, cancel_share=0.0,
        max_outstanding=args.max_outstanding, rpc_timeout_s=30.0, seed=index,
        connections=args.connections,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--servers", type=int, default=1, help="server processes, one port")
    parser.add_argument("--producers", type=int, default=4, help="producer processes")
    parser.add_argument("--connections", type=int, default=4, help="per producer process")
    parser.add_argument("--rate", type=int, default=8_000, help="calls a second offered, in all")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of sending")
    parser.add_argument("--max-outstanding", type=int, default=64, help="per producer")
    parser.add_argument("--body-bytes", type=int, default=128)
    args = parser.parse_args(argv)
    for name in ("servers", "producers", "connections", "rate", "max_outstanding"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}={getattr(args, name)}: must be at least 1")
    if args.duration <= 0:
        parser.error(f"--duration={args.duration}: must be positive")
    print(json.dumps(measure(args)))


if __name__ == "__main__":
    main()
