"""FETCH_WAIT in process: the handler and the append waiters on a real log in tmp_path."""

from __future__ import annotations

import asyncio

from logbroker.config import BrokerConfig
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import FetchRequest, ProduceRequest, WaitingFetchRequest
from logbroker.server.handlers import RequestHandlers
from logbroker.server.metrics import BrokerMetrics
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
