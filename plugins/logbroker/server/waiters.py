"""Fetches that wait for data (the FETCH_WAIT extension).

A waiting fetch registers a future under every (topic, partition) it reads; an append to one
of them resolves the futures registered there. Both sides run on the broker's event loop, so
there is no lock, and an append with nobody waiting costs one dict lookup.

The wait is the future itself with a timer beside it (not asyncio.wait_for, which puts a
second future and one more event-loop turn between the append and the waiting task):
an append resolves the future, and the task runs on the loop's next turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

Key = tuple[str, int]


class AppendWaiters:
    def __init__(self) -> None:
        self._waiting: dict[Key, set[asyncio.Future[bool]]] = {}
        self.closed = False  # set by wake_all: the broker is stopping, nobody waits any more

    def appended(self, topic: str, partition: int) -> None:
        """Wake every fetch waiting on this partition."""
        futures = self._waiting.pop((topic, partition), None)
        if futures:
            for future in futures:
                if not future.done():
                    future.set_result(True)

    async def wait(self, keys: Iterable[Key], timeout: float) -> bool:
        """Until an append to any of `keys`, or `timeout` seconds; True if woken by data."""
        if self.closed:
            return False
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        keys = list(keys)
        for key in keys:
            self._waiting.setdefault(key, set()).add(future)
        timer = loop.call_later(timeout, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()
            for key in keys:
                waiting = self._waiting.get(key)
                if waiting is not None:
                    waiting.discard(future)
                    if not waiting:
                        del self._waiting[key]

    def wake_all(self) -> None:
        """Answer every waiting fetch now, and let none wait again (the broker is stopping)."""
        self.closed = True
        for key in list(self._waiting):
            self.appended(*key)

    def __len__(self) -> int:
        return sum(len(f) for f in self._waiting.values())


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)
