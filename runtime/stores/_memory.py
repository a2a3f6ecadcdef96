"""The in-process store: a dict with TTLs on trio's clock. Its steps never suspend."""

from __future__ import annotations

import collections
from collections.abc import Callable

import trio

__all__ = ["MemoryStore"]


class MemoryStore:
    """State kept in this process only (the default). Bounded to `max_keys` live keys (the
    least recently written go first); TTLs run on `clock` (trio's, so MockClock moves them).

    No method ever suspends: the engine runs them in place, so a policy on a MemoryStore costs
    no task switch. `aclose` keeps the data (a store outlives a runtime that borrows it).
    """

    def __init__(self, *, clock: Callable[[], float] | None = None, max_keys: int = 100_000) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys!r}")
        self._clock = clock if clock is not None else trio.current_time
        self._max = max_keys
        # key -> (value, expires at or None); insertion order is write order
        self._data: collections.OrderedDict[str, tuple[object, float | None]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def _live(self, key: str) -> tuple[object, float | None] | None:
        entry = self._data.get(key)
        if entry is not None and entry[1] is not None and entry[1] <= self._clock():
            del self._data[key]
            return None
        return entry

    def _put(self, key: str, value: object, ttl: float | None) -> None:
        data = self._data
        data[key] = (value, None if ttl is None else self._clock() + ttl)
        data.move_to_end(key)
        if len(data) > self._max:
            now = self._clock()
            for k in [k for k, (_, t) in data.items() if t is not None and t <= now]:
                del data[k]
            while len(data) > self._max:
                data.popitem(last=False)

    async def get(self, key: str) -> bytes | None:
        entry = self._live(key)
        if entry is None or not isinstance(entry[0], bytes):
            return None
        return entry[0]

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        self._put(key, bytes(value), ttl)

    async def add(self, key: str, value: bytes, ttl: float | None = None) -> bool:
        if self._live(key) is not None:
            return False
        self._put(key, bytes(value), ttl)
        return True

    async def delete(self, key: str) -> bool:
        return self._live(key) is not None and self._data.pop(key, None) is not None

    async def delete_prefix(self, prefix: str) -> int:
        doomed = [k for k in self._data if k.startswith(prefix) and self._live(k) is not None]
        for k in doomed:
            del self._data[k]
        return len(doomed)

    async def keys(self, prefix: str) -> list[str]:
        return [k for k in list(self._data) if k.startswith(prefix) and self._live(k) is not None]

    async def incr(self, key: str, amount: int = 1, ttl: float | None = None) -> int:
        entry = self._live(key)
        if entry is None:
            self._put(key, str(amount).encode(), ttl)
            return amount
        value, expires = entry
        try:
            current: int = int(value)  # type: ignore[call-overload]
            new: int = current + amount
        except (TypeError, ValueError):
            raise ValueError(f"key {key!r} does not hold an integer") from None
        self._data[key] = (str(new).encode(), expires)
        return new

    async def take(self, key: str, rate: float, burst: float, cost: float = 1.0) -> float:
        now = self._clock()
        entry = self._live(key)
        if entry is None or not isinstance(entry[0], tuple):
            tokens, at = burst, now
        else:
            tokens, at = entry[0]
            tokens = min(burst, tokens + (now - at) * rate)
        # a full bucket refills in burst/rate seconds; after that the key is not needed
        ttl = burst / rate + 1.0 if rate > 0 else None
        if tokens >= cost:
            self._put(key, (tokens - cost, now), ttl)
            return 0.0
        self._put(key, (tokens, now), ttl)
        if rate <= 0:
            return float("inf")
        return (cost - tokens) / rate

    async def aclose(self) -> None:
        pass
