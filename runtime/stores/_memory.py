"""The in-process store: a dict with TTLs on trio's clock. Its steps never suspend."""

from __future__ import annotations

import collections
from collections.abc import Callable

import trio

__all__ = ["MemoryStore", "key_group"]


def key_group(key: str) -> str:
    """Whose a key is, by the resilience policies' convention `kind:tool\\x00principal\\x00...`
    (and `rate:principal\\x00P`): the text after the first NUL, up to the next; "" for a key with
    none (the runtime's own: a tool's rate bucket, a breaker)."""
    start = key.find("\x00")
    if start < 0:
        return ""
    end = key.find("\x00", start + 1)
    return key[start + 1 :] if end < 0 else key[start + 1 : end]


class MemoryStore:
    """State kept in this process only (the default). Bounded to `max_keys` live keys; TTLs run
    on `clock` (trio's, so MockClock moves them).

    Keys belong to groups (`group(key)`: by default the principal in the policies' keys,
    `key_group`). When the store is full, room is made in the group that holds the most keys,
    its least recently written first (after expired keys, swept now and then): one principal's
    flood of distinct calls evicts that principal's own journal, never another's. Each group is
    thus sure of `max_keys / groups` keys whatever the others do. A store whose keys carry no
    group (`group=None`) is one group: the least recently written key goes first.

    No method ever suspends: the engine runs them in place, so a policy on a MemoryStore costs
    no task switch. `aclose` keeps the data (a store outlives a runtime that borrows it).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] | None = None,
        max_keys: int = 100_000,
        group: Callable[[str], str] | None = key_group,
    ) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys!r}")
        self._clock = clock if clock is not None else trio.current_time
        self._max = max_keys
        self._group_of = group
        # key -> (value, expires at or None, its group)
        self._data: dict[str, tuple[object, float | None, str]] = {}
        # group -> its keys, least recently written first
        self._groups: dict[str, collections.OrderedDict[str, None]] = {}
        self._sizes: dict[int, set[str]] = {}  # how many keys -> the groups that hold that many
        self._largest = 0
        self._writes = 0  # writes since expired keys were last swept

    def __len__(self) -> int:
        return len(self._data)

    def _live(self, key: str) -> tuple[object, float | None, str] | None:
        entry = self._data.get(key)
        if entry is not None and entry[1] is not None and entry[1] <= self._clock():
            self._remove(key)
            return None
        return entry

    def _resize(self, group: str, old: int, new: int) -> None:
        sizes = self._sizes
        if old:
            holders = sizes[old]
            holders.discard(group)
            if not holders:
                del sizes[old]
        if new:
            sizes.setdefault(new, set()).add(group)
            if new > self._largest:
                self._largest = new
        while self._largest and self._largest not in sizes:
            self._largest -= 1

    def _remove(self, key: str) -> None:
        _, _, group = self._data.pop(key)
        keys = self._groups[group]
        del keys[key]
        if not keys:
            del self._groups[group]
        self._resize(group, len(keys) + 1, len(keys))

    def _put(self, key: str, value: object, ttl: float | None) -> None:
        data = self._data
        old = data.get(key)
        group = old[2] if old is not None else (self._group_of(key) if self._group_of is not None else "")
        data[key] = (value, None if ttl is None else self._clock() + ttl, group)
        keys = self._groups.get(group)
        if keys is None:
            keys = self._groups[group] = collections.OrderedDict()
        if old is None:
            keys[key] = None
            self._resize(group, len(keys) - 1, len(keys))
        else:
            keys.move_to_end(key)
        self._writes += 1
        if len(data) > self._max:
            self._make_room()

    def _make_room(self) -> None:
        data = self._data
        if self._writes >= len(data) // 2:  # now and then (each key swept at most once per half)
            self._writes = 0
            now = self._clock()
            for k in [k for k, (_, t, _) in data.items() if t is not None and t <= now]:
                self._remove(k)
        while len(data) > self._max:
            largest = next(iter(self._sizes[self._largest]))
            self._remove(next(iter(self._groups[largest])))

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
        if self._live(key) is None:
            return False
        self._remove(key)
        return True

    async def delete_prefix(self, prefix: str) -> int:
        doomed = [k for k in self._data if k.startswith(prefix) and self._live(k) is not None]
        for k in doomed:
            self._remove(k)
        return len(doomed)

    async def keys(self, prefix: str) -> list[str]:
        return [k for k in list(self._data) if k.startswith(prefix) and self._live(k) is not None]

    async def incr(self, key: str, amount: int = 1, ttl: float | None = None) -> int:
        entry = self._live(key)
        if entry is None:
            self._put(key, str(amount).encode(), ttl)
            return amount
        value, expires, group = entry
        try:
            current: int = int(value)  # type: ignore[call-overload]
            new: int = current + amount
        except (TypeError, ValueError):
            raise ValueError(f"key {key!r} does not hold an integer") from None
        self._data[key] = (str(new).encode(), expires, group)
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

    async def swap(self, key: str, old: bytes | None, new: bytes | None, ttl: float | None = None) -> bool:
        entry = self._live(key)
        held = entry[0] if entry is not None and isinstance(entry[0], bytes) else None
        if entry is not None and held is None:
            return False  # a counter or a bucket: never what a caller read with `get`
        if held != (None if old is None else bytes(old)):
            return False
        if new is None:
            if entry is not None:
                self._remove(key)
        else:
            self._put(key, bytes(new), ttl)
        return True

    async def aclose(self) -> None:
        pass
