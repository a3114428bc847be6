"""FETCH_WAIT in process: the handler and the append waiters on a real log in tmp_path
(and, for the hand-over, real connections over socket pairs)."""

from __future__ import annotations

import asyncio
import socket
import struct

from logbroker.config import BrokerConfig
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import (
    FetchRequest,
    ProduceRequest,
    WaitingFetchRequest,
    encode_request,
)
from logbroker.server.connection import ClientConnection
from logbroker.server.handlers import RequestHandlers
from logbroker.server.metrics import BrokerMetrics
from logbroker.server.socket_server import SocketServer
from logbroker.server.waiters import AppendWaiters
from logbroker.storage.log_manager import LogManager


def handlers(tmp_path) -> RequestHandlers:
    config = BrokerConfig(log_dir=str(tmp_path))
    return RequestHandlers(LogManager(config), config, BrokerMetrics(0), AppendWaiters())


def data_size(response) -> int:
    return sum(p.length for p in response if not isinstance(p, bytes))


def test_an_append_between_the_request_and_its_first_wait_is_not_missed(tmp_path):
    h = handlers(tmp_path)
    h.produce(ProduceRequest("t", 0, build_message_set([b"old"])), "client")
    # max_wait is an hour: a fetch that missed the append would not answer within 60 s
    wait = WaitingFetchRequest(3_600_000, 1, (FetchRequest("t", 0, 13, 1000),))

    async def scenario():
        pending = h.waiting_fetch(wait, "consumer")  # nothing past 13 yet: a coroutine
        # the produce is handled before the waiting task has taken its first step
        h.produce(ProduceRequest("t", 0, build_message_set([b"new"])), "producer")
        return await asyncio.wait_for(pending, 60)

    response = asyncio.run(scenario())
    assert data_size(response) == 13


def test_waiting_fetch_wakes_on_append_and_times_out_empty(tmp_path):
    h = handlers(tmp_path)
    h.produce(ProduceRequest("t", 0, build_message_set([b"old"])), "client")

    async def scenario():
        woken = asyncio.ensure_future(
            h.waiting_fetch(WaitingFetchRequest(10_000, 1, (FetchRequest("t", 0, 13, 99),)), "c")
        )
        for _ in range(10):  # let the fetch run up to its wait (no time passes)
            await asyncio.sleep(0)
        assert not woken.done()
        h.produce(ProduceRequest("t", 0, build_message_set([b"new"])), "producer")
        first = await asyncio.wait_for(woken, 5)
        idle = await h.waiting_fetch(
            WaitingFetchRequest(100, 1, (FetchRequest("t", 0, 26, 99),)), "c"
        )
        return first, idle

    first, idle = asyncio.run(scenario())
    assert data_size(first) == 13
    assert data_size(idle) == 0
    assert len(h.waiters) == 0  # nothing left registered


def test_the_append_itself_sends_the_waiting_fetch_its_answer(tmp_path):
    """No event-loop turn between an append and the answer to a fetch waiting for it: by the
    time the producer's bytes are handled, the consumer's socket holds its answer."""
    config = BrokerConfig(log_dir=str(tmp_path))
    entry = build_message_set([b"hello"])
    produce = encode_request(ProduceRequest("t", 0, entry))
    wait = WaitingFetchRequest(600_000, 1, (FetchRequest("t", 0, len(entry), 1000),))

    async def scenario():
        loop = asyncio.get_running_loop()
        metrics = BrokerMetrics(0)
        h = RequestHandlers(LogManager(config), config, metrics, AppendWaiters())
        server = SocketServer(config, h, metrics, loop)
        ends = {}
        for name in ("producer", "consumer"):
            ours, theirs = socket.socketpair()
            transport, conn = await loop.connect_accepted_socket(
                lambda: ClientConnection(server), ours
            )
            ends[name] = (theirs, conn, transport)
        consumer, consumer_conn, _ = ends["consumer"]
        producer_conn = ends["producer"][1]
        producer_conn.data_received(produce)  # the first message: the fetch starts after it
        consumer_conn.data_received(encode_request(wait))
        assert len(h.waiters) == 1
        producer_conn.data_received(produce)  # what the loop would call: nothing else runs
        answer = consumer.recv(1 << 16, socket.MSG_DONTWAIT)
        assert len(h.waiters) == 0
        for sock, _, transport in ends.values():
            transport.close()
            sock.close()
        await asyncio.sleep(0)
        return answer

    answer = asyncio.run(scenario())
    size, outer, set_size, set_error = struct.unpack_from(">ihih", answer)
    assert (size, outer, set_error) == (len(answer) - 4, 0, 0)
    assert answer[12:] == entry and set_size == 2 + len(entry)


def test_a_waiting_fetch_goes_on_waiting_until_min_bytes_and_goes_when_its_client_does(
    tmp_path,
):
    h = handlers(tmp_path)
    entry = build_message_set([b"x" * 20])

    async def scenario():
        pending = h.waiting_fetch(
            WaitingFetchRequest(600_000, 2 * len(entry), (FetchRequest("t", 0, 0, 1000),)), "c"
        )
        h.produce(ProduceRequest("t", 0, entry), "producer")
        assert not pending.done and len(h.waiters) == 1  # one message is not enough
        h.produce(ProduceRequest("t", 0, entry), "producer")
        assert pending.done and len(h.waiters) == 0
        first = await pending
        gone = h.waiting_fetch(
            WaitingFetchRequest(600_000, 1, (FetchRequest("t", 0, 2 * len(entry), 1000),)), "c"
        )
        gone.cancel()  # what the connection does when its client leaves
        assert len(h.waiters) == 0
        h.produce(ProduceRequest("t", 0, entry), "producer")  # and appends go on
        return first

    first = asyncio.run(scenario())
    assert data_size(first) == 2 * len(entry)
