"""timerwheel.AsyncClient over real gRPC: the same calls awaited, Subscribe as an async
iterator, the async batching producer (16 tasks x single sends -> few SendBatch calls),
and async consume with ack, nack and stop on an idle topic."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from helpers.credentials import make_pki, write_tokens
from helpers.waits import WAIT_S

import timerwheel
from timerwheel.common import State
from timerwheel.security.settings import SecuritySettings
from timerwheel.server.service import TimerService


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, WAIT_S * 3))


def test_the_calls_awaited(server):
    async def main():
        async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S) as client:
            await client.wait_ready()
            sent = await client.send("orders", "hi", delay_ms="1h", properties={"k": "v"})
            info = await client.get(sent.message_id)
            assert info.state is State.SCHEDULED and info.state.name == "SCHEDULED"
            assert info.body == b"hi" and dict(info.properties) == {"k": "v"}
            page, token = await client.list("orders", limit=10)
            assert [m.message_id for m in page] == [sent.message_id] and token == ""
            assert [m.message_id async for m in client.list_all("orders")] == [sent.message_id]
            assert await client.cancel(sent.message_id) is State.CANCELLED
            again = await client.send("orders", "hi", delay_ms="1h", properties={"k": "v"},
                                      message_id=sent.message_id)  # fmt: skip
            assert again.existed and again.existing_state is State.CANCELLED
            batch = await client.send_batch([client.request("orders", b"b", delay_ms=1)] * 2)
            assert len(batch) == 2
            assert (await client.stats()).column_family_keys["messages"] >= 3
            await client.send("alerts", "", delay_ms="1h")
            assert [t.topic for t in await client.topics()] == ["alerts", "orders"]
            page = await client.topics_page(limit=1)
            assert [t.topic for t in page.topics] == ["alerts"] and page.total == 2
            assert [t.topic for t in await client.topics(after="alerts")] == ["orders"]
            assert await client.health_status() == "SERVING"
            with pytest.raises(timerwheel.RemoteError) as info:
                await client.get("nope")
            assert info.value.code == grpc.StatusCode.NOT_FOUND

    run(main())


def test_subscribe_is_an_async_iterator_of_batches(server):
    async def main():
        async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S) as client:
            sent = await client.send_batch(
                [client.request("stream", f"m{i}", delay_ms=0) for i in range(5)]
            )
            got: list[str] = []
            async with client.subscribe("stream") as stream:
                async for batch in stream:
                    got += [d.message_id for d in batch]
                    await client.ack("stream", [d.message_id for d in batch])
                    if len(got) >= 5:
                        break
            assert sorted(got) == sorted(r.message_id for r in sent)
            assert (await client.stats()).unacked == 0

    run(main())


def test_16_tasks_of_single_sends_arrive_as_batches(make_server, monkeypatch):
    sizes: list[int] = []
    original = TimerService.SendBatch

    def counting(self, request, context):
        sizes.append(len(request.messages))
        return original(self, request, context)

    monkeypatch.setattr(TimerService, "SendBatch", counting)
    server = make_server()

    async def main():
        async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S) as client:
            async with client.producer(linger_ms=5) as producer:

                async def produce(index: int) -> list[timerwheel.SendResult]:
                    return [
                        await producer.send("tdmq", f"{index}-{i}", delay_ms="1h")
                        for i in range(50)
                    ]

                results = await asyncio.gather(*(produce(i) for i in range(16)))
            return [r for task in results for r in task], producer.batches_sent

    results, batches_sent = run(main())
    assert len({r.message_id for r in results}) == 800 == sum(sizes)
    assert len(sizes) == batches_sent <= 800 / 4, sizes


def test_async_producer_maps_errors_per_message_and_refuses_after_close(server):
    async def main():
        async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S) as client:
            producer = client.producer(linger_ms=10_000, max_batch=2)
            good = producer.send("p", b"ok", delay_ms="1h")
            bad = producer.send("p", b"x", delay_level=99)
            assert (await good).message_id
            with pytest.raises(timerwheel.RemoteError) as info:
                await bad
            assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
            waiting = producer.send("p", b"last", delay_ms="1h")
            await producer.close()
            assert waiting.done() and waiting.result().message_id
            with pytest.raises(RuntimeError, match="closed"):
                producer.send("p", b"late", delay_ms="1h")

    run(main())


def test_async_consume_acks_nacks_and_stops_when_idle(make_server):
    server = make_server()  # ack timeout 30 s: a quick second attempt is the Nack RPC

    async def main():
        async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S) as client:
            sent = await client.send_batch(
                [client.request("jobs", f"m{i}", delay_ms=0) for i in range(10)]
            )
            stop = asyncio.Event()
            seen: list[tuple[str, int]] = []

            async def handle(message: timerwheel.Message) -> None:
                seen.append((message.message_id, message.attempt))
                if len(seen) >= 11:
                    stop.set()
                if message.message_id == sent[0].message_id and message.attempt == 1:
                    raise RuntimeError("first try fails")

            acked = await client.consume("jobs", handle, concurrency=3, stop=stop)
            assert acked == 10
            assert (sent[0].message_id, 2) in seen and len(seen) == 11
            assert (await client.get(sent[0].message_id)).state is State.ACKED

            idle_stop = asyncio.Event()
            consumer = asyncio.create_task(client.consume("idle", handle, stop=idle_stop))
            await asyncio.sleep(0)  # let it subscribe
            idle_stop.set()
            assert await asyncio.wait_for(consumer, WAIT_S) == 0

    run(main())


def test_the_async_client_reaches_a_tls_and_token_server(make_server, tmp_path):
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(
        tls_cert_file=pki.server_cert, tls_key_file=pki.server_key,
        auth_tokens_file=str(tmp_path / "tokens.toml"),
    )  # fmt: skip
    server = make_server(security=security)

    async def main():
        tls = timerwheel.Tls(ca_file=pki.ca)
        async with timerwheel.AsyncClient(
            server.target, timeout_s=WAIT_S, tls=tls, token=tokens["admin"]
        ) as client:
            sent = await client.send("orders.a", b"secure", delay_ms="1h")
            assert (await client.get(sent.message_id)).body == b"secure"
        async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S, tls=tls) as anonymous:
            with pytest.raises(timerwheel.RemoteError) as info:
                await anonymous.stats()
            assert info.value.code == grpc.StatusCode.UNAUTHENTICATED

    run(main())
