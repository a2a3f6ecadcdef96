"""A store that keeps working when its real store does not: memory while the primary is down."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ._memory import MemoryStore
from ._protocol import Store, StoreError

__all__ = ["DegradingStore"]

log = logging.getLogger("runtime.stores")

T = TypeVar("T")


class DegradingStore:
    """`primary`, or `fallback` (a MemoryStore) while the primary fails.

    A failed step (StoreError, OSError, a timeout) is answered by the fallback, counted in
    `failures` and logged once per outage; for `retry_after` seconds every step goes to the
    fallback, then the primary is tried again. So a Redis outage costs the runtime its shared
    state (each process counts alone for a while), never its calls.
    """

    def __init__(self, primary: Store, fallback: Store | None = None, *, retry_after: float = 5.0) -> None:
        self.primary = primary
        self.fallback: Store = fallback if fallback is not None else MemoryStore(clock=time.monotonic)
        self.retry_after = retry_after
        self.failures = 0
        self._down_until: float | None = None

    @property
    def degraded(self) -> bool:
        """True while steps go to the fallback."""
        return self._down_until is not None

    async def _do(self, step: Callable[[Store], Awaitable[T]]) -> T:
        down = self._down_until
        if down is not None and time.monotonic() < down:
            return await step(self.fallback)
        try:
            value = await step(self.primary)
        except (StoreError, OSError, TimeoutError) as exc:
            self.failures += 1
            if self._down_until is None:
                log.warning("store %s failed (%s); using memory for now", type(self.primary).__name__, exc)
            self._down_until = time.monotonic() + self.retry_after
            return await step(self.fallback)
        if down is not None:
            log.warning("store %s answers again", type(self.primary).__name__)
            self._down_until = None
        return value

    async def get(self, key: str) -> bytes | None:
        return await self._do(lambda s: s.get(key))

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        await self._do(lambda s: s.set(key, value, ttl))

    async def add(self, key: str, value: bytes, ttl: float | None = None) -> bool:
        return await self._do(lambda s: s.add(key, value, ttl))

    async def delete(self, key: str) -> bool:
        return await self._do(lambda s: s.delete(key))

    async def delete_prefix(self, prefix: str) -> int:
        return await self._do(lambda s: s.delete_prefix(prefix))

    async def keys(self, prefix: str) -> list[str]:
        return await self._do(lambda s: s.keys(prefix))

    async def incr(self, key: str, amount: int = 1, ttl: float | None = None) -> int:
        return await self._do(lambda s: s.incr(key, amount, ttl))

    async def take(self, key: str, rate: float, burst: float, cost: float = 1.0) -> float:
        return await self._do(lambda s: s.take(key, rate, burst, cost))

    async def aclose(self) -> None:
        try:
            await self.primary.aclose()
        finally:
            await self.fallback.aclose()
