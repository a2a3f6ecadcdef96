"""The state-store protocol: what the resilience policies keep outside one call.

A store holds bytes under string keys, each with an optional time to live, plus the two atomic
steps that cannot be built from get/set without a race: a counter (`incr`) and a token bucket
(`take`), and the compare-and-set every state machine shared by processes is built on (`swap`).
Everything a policy keeps is made of these: the replay journal and the cache (`get`/`set`),
in-flight claims shared by several processes (`add`), breaker state (`incr` + `set`), rate
limits (`take`), the journal of detached and deferred calls (`swap`). Every method is a trio
coroutine; TTLs are seconds.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Store", "StoreError"]


class StoreError(Exception):
    """A store could not do what it was asked (down, unreachable, corrupt); callers degrade."""


@runtime_checkable
class Store(Protocol):
    """Small async key-value state, shared by whoever opens the same store.

    Keys are text (at most a few hundred characters); values are bytes. A key whose TTL passed
    is gone for every method. Implementations raise `StoreError` (or OSError) when they cannot
    answer; they never block the trio loop for long (I/O happens in a thread or on a socket).
    """

    async def get(self, key: str) -> bytes | None:
        """The value under `key`, or None."""
        ...

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        """Store `value` under `key` (replacing any), for `ttl` seconds (None: until deleted)."""
        ...

    async def add(self, key: str, value: bytes, ttl: float | None = None) -> bool:
        """Store `value` only if `key` holds nothing; True if it was stored (a claim)."""
        ...

    async def delete(self, key: str) -> bool:
        """Remove `key`; True if it held something."""
        ...

    async def delete_prefix(self, prefix: str) -> int:
        """Remove every key that starts with `prefix`; how many there were."""
        ...

    async def keys(self, prefix: str) -> list[str]:
        """The live keys that start with `prefix` (any order)."""
        ...

    async def incr(self, key: str, amount: int = 1, ttl: float | None = None) -> int:
        """Add `amount` to the integer under `key` (0 if absent) and return the new value,
        atomically. `ttl` applies when the key is created by this call (a window)."""
        ...

    async def take(self, key: str, rate: float, burst: float, cost: float = 1.0) -> float:
        """A token bucket under `key`, refilled at `rate` tokens a second up to `burst`, full
        when new: take `cost` tokens and return 0.0, or take nothing and return the seconds
        until `cost` tokens will be there. Atomic: racers never take more than there is."""
        ...

    async def swap(self, key: str, old: bytes | None, new: bytes | None, ttl: float | None = None) -> bool:
        """Replace what `key` holds with `new` (None: remove it), only if it holds `old` now
        (None: nothing); True if it did. Atomic: of two racers that read the same `old`, one
        wins. `ttl` applies to `new` (None: until deleted)."""
        ...

    async def aclose(self) -> None:
        """Release connections and threads; the store is not used afterwards."""
        ...
