"""A store that keeps working when its real store does not: memory while the primary is down,
and never waited out by a call whose deadline it would cost."""

from __future__ import annotations

import collections
import logging
import math
import time
from typing import Any

import trio

from ._memory import MemoryStore
from ._protocol import Store, StoreError

__all__ = ["DegradingStore"]

log = logging.getLogger("runtime.stores")

_ADDED = ("added",)  # a claim taken in the fallback: never copied (a delete of it cancels out)
_DELETED = ("deleted",)  # a key deleted in the fallback: deleted in the primary too


class _Steps:
    """The store's steps, written once over `_step(op, *args)` (a `DegradingStore`'s, or a call's
    view of it, `DegradingStore.within`)."""

    async def _step(self, op: str, *args: Any) -> Any:
        raise NotImplementedError

    async def get(self, key: str) -> bytes | None:
        value: bytes | None = await self._step("get", key)
        return value

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        await self._step("set", key, value, ttl)

    async def add(self, key: str, value: bytes, ttl: float | None = None) -> bool:
        added: bool = await self._step("add", key, value, ttl)
        return added

    async def delete(self, key: str) -> bool:
        deleted: bool = await self._step("delete", key)
        return deleted

    async def delete_prefix(self, prefix: str) -> int:
        count: int = await self._step("delete_prefix", prefix)
        return count

    async def keys(self, prefix: str) -> list[str]:
        found: list[str] = await self._step("keys", prefix)
        return found

    async def incr(self, key: str, amount: int = 1, ttl: float | None = None) -> int:
        value: int = await self._step("incr", key, amount, ttl)
        return value

    async def take(self, key: str, rate: float, burst: float, cost: float = 1.0) -> float:
        wait: float = await self._step("take", key, rate, burst, cost)
        return wait

    async def swap(self, key: str, old: bytes | None, new: bytes | None, ttl: float | None = None) -> bool:
        swapped: bool = await self._step("swap", key, old, new, ttl)
        return swapped


class DegradingStore(_Steps):
    """`primary`, or `fallback` (a MemoryStore) while the primary fails or is too slow.

    A failed step (StoreError, OSError, a timeout) is answered by the fallback, counted in
    `failures` and logged once per outage; for `retry_after` seconds every step goes to the
    fallback, then the primary is tried again. So a Redis outage costs the runtime its shared
    state (each process counts alone for a while), never its calls.

    A call's steps go through `within(deadline)`: each waits for the primary at most `share` of
    the time the call has left (never less than `min_step`, never more than `step_timeout`), so
    a primary that hangs (a Redis stopped, an SQLite file another connection locked) is never
    waited out: the step is answered by the fallback, counted, and that call's later steps go
    to the fallback at once. A primary that answered nothing for `step_timeout` while it was
    asked is down for everyone, as if it had failed.

    What the fallback wrote meanwhile (`set`, `delete`, `delete_prefix`) is copied to the primary
    when it answers again, before any other step reaches it: a dedupe journal written while Redis
    was down is there once it is back, and a replay does not run the tool again (a `swap` that
    took place is copied as the write it made). Given a nursery
    (`copy_back_in`: the runtime gives its own), a task copies it as soon as the primary answers
    (it asks every `probe_every` seconds while there is something to copy), not only at the next
    step of this process: another process's replay finds the journal too. Counters, token
    buckets and claims are not copied: they start afresh (a claim expires on its own).

    The copy never undoes what other processes did since: a value is written only where the
    primary holds none now (what was written there since wins), and the keys that start with
    one of `not_copied` (a cache's entries, `cache:`) are dropped instead, since a key the
    primary lacks may have been invalidated meanwhile, and a result kept only to save work
    would come back stale. What is copied (or dropped) leaves the fallback too.
    """

    def __init__(
        self,
        primary: Store,
        fallback: Store | None = None,
        *,
        retry_after: float = 5.0,
        step_timeout: float = 1.0,
        share: float = 0.1,
        min_step: float = 0.05,
        max_pending: int = 100_000,
        probe_every: float = 0.25,
        not_copied: tuple[str, ...] = ("cache:",),
    ) -> None:
        self.primary = primary
        self.fallback: Store = fallback if fallback is not None else MemoryStore(clock=time.monotonic)
        self.retry_after = retry_after
        self.step_timeout = step_timeout
        self.share = share
        self.min_step = min_step
        self.max_pending = max_pending
        self.probe_every = probe_every
        self.not_copied = not_copied
        self.failures = 0
        """Steps the primary did not answer (failed, or too slow for their call): the fallback did."""
        self.copied = 0
        """Writes of the fallback copied to the primary once it answered again."""
        self._down_until: float | None = None
        self._unanswered_since: float | None = None  # asked, and no answer since (time.monotonic)
        # what the fallback wrote, to copy to the primary: key -> (value, expires) | _ADDED | _DELETED
        self._pending: collections.OrderedDict[str, tuple[Any, ...]] = collections.OrderedDict()
        self._prefixes: collections.deque[str] = collections.deque()  # delete_prefix, in order
        self._copying = trio.Lock()
        self._dropped = False
        self._nursery: trio.Nursery | None = None  # where the copy-back task runs (`copy_back_in`)
        self._copier: trio.CancelScope | None = None  # the copy-back task's, while it runs

    @property
    def degraded(self) -> bool:
        """True while steps go to the fallback."""
        return self._down_until is not None

    def copy_back_in(self, nursery: trio.Nursery | None) -> None:
        """Copy what the fallback wrote back to the primary from a task in `nursery`, as soon as
        the primary answers again (None: at the next step that reaches it, as without one)."""
        self._nursery = nursery
        self._start_copier()

    def within(self, deadline: float) -> Store:
        """This store as one call's steps see it: the call must end by `deadline` (trio time;
        inf: no limit of its own), and none of its steps waits out a primary that does not
        answer (see the class)."""
        return _CallSteps(self, deadline)

    async def _step(self, op: str, *args: Any) -> Any:
        return await self._do(op, args, None)

    async def _do(self, op: str, args: tuple[Any, ...], call: _CallSteps | None) -> Any:
        down = self._down_until
        if (down is not None and time.monotonic() < down) or (call is not None and call.down):
            return await self._fallback(op, args)
        limit = math.inf if call is None else call.limit()
        if self._unanswered_since is None:
            self._unanswered_since = time.monotonic()
        try:
            with trio.move_on_after(limit) as cut:
                if self._pending or self._prefixes:
                    await self._copy()
                value = await getattr(self.primary, op)(*args)
        except (StoreError, OSError, TimeoutError) as exc:
            self._down(exc)
            return await self._fallback(op, args)
        if cut.cancelled_caught:  # too slow for this call: down for it, counted
            assert call is not None  # only a call's steps have a limit
            call.down = True
            self.failures += 1
            since = self._unanswered_since
            if since is not None and time.monotonic() - since >= self.step_timeout:
                self.failures -= 1  # counted once, by `_down`
                self._down(StoreError(f"no answer for {self.step_timeout:g}s"))
            return await self._fallback(op, args)
        self._unanswered_since = None
        if down is not None:
            log.warning("store %s answers again", type(self.primary).__name__)
            self._down_until = None
        return value

    def _down(self, exc: BaseException) -> None:
        self.failures += 1
        if self._down_until is None:
            log.warning("store %s failed (%s); using memory for now", type(self.primary).__name__, exc)
        self._down_until = time.monotonic() + self.retry_after

    async def _fallback(self, op: str, args: tuple[Any, ...]) -> Any:
        value = await getattr(self.fallback, op)(*args)
        pending = self._pending
        if op == "swap":  # a swap that took place is a write like any other: copied back
            if not value:
                return value
            key, _, data, ttl = args
            op, args = ("set", (key, data, ttl)) if data is not None else ("delete", (key,))
        if op == "set":
            key, data, ttl = args
            pending[key] = (data, None if ttl is None else time.monotonic() + ttl)
            pending.move_to_end(key)
        elif op == "add":
            if value and args[0] not in pending:
                pending[args[0]] = _ADDED
        elif op == "delete":
            key = args[0]
            if pending.get(key) is _ADDED:
                del pending[key]  # claimed and let go while down: nothing for the primary
            else:
                pending[key] = _DELETED
                pending.move_to_end(key)
        elif op == "delete_prefix":
            prefix = args[0]
            for key in [k for k in pending if k.startswith(prefix)]:
                del pending[key]
            self._prefixes.append(prefix)
        else:
            return value
        self._start_copier()
        while len(pending) > self.max_pending:
            pending.popitem(last=False)
            if not self._dropped:
                self._dropped = True
                log.warning(
                    "store %s: more than %d writes waiting to be copied back; the oldest are dropped",
                    type(self.primary).__name__,
                    self.max_pending,
                )
        return value

    async def _copy(self) -> None:
        """Copy the fallback's writes to the primary, oldest first, once (one copier at a time;
        what is copied leaves the list, so a copy cut short goes on at the next step). Each of
        its steps waits for the primary at most `step_timeout` (then StoreError)."""
        async with self._copying:
            primary, fallback = self.primary, self.fallback
            pending, prefixes = self._pending, self._prefixes
            while prefixes:
                await self._ask(primary.delete_prefix(prefixes[0]))
                prefixes.popleft()
                self.copied += 1
            while pending:
                key, entry = next(iter(pending.items()))
                copied = False
                if entry is _DELETED:
                    await self._ask(primary.delete(key))
                    copied = True
                elif entry is not _ADDED and not key.startswith(self.not_copied):
                    data, expires = entry
                    ttl = None if expires is None else expires - time.monotonic()
                    if ttl is None or ttl > 0:
                        copied = await self._ask(primary.add(key, data, ttl))  # never over a newer value
                if pending.get(key) is entry:  # not written again meanwhile
                    del pending[key]
                    if entry is not _ADDED and entry is not _DELETED:  # the primary's now (or dropped)
                        await fallback.delete(key)
                self.copied += copied
            if self._dropped:
                self._dropped = False
            log.info(
                "store %s: the writes made while it was down are copied to it", type(self.primary).__name__
            )

    async def _ask(self, step: Any) -> Any:
        """A step of the copy, awaited at most `step_timeout` (StoreError: no answer)."""
        with trio.move_on_after(self.step_timeout):
            return await step
        raise StoreError(f"no answer for {self.step_timeout:g}s")

    def _start_copier(self) -> None:
        nursery = self._nursery
        if nursery is None or self._copier is not None or not (self._pending or self._prefixes):
            return
        scope = self._copier = trio.CancelScope()
        try:
            nursery.start_soon(self._copy_back, scope)
        except RuntimeError:  # the nursery is closing (so is the runtime): the next step copies
            self._copier = None

    async def _copy_back(self, scope: trio.CancelScope) -> None:
        """Ask the primary every `probe_every` seconds, while there is something to copy, and
        copy it once the primary answers: it is then used again by every step."""
        try:
            with scope:
                while self._pending or self._prefixes:
                    await trio.sleep(self.probe_every)
                    try:
                        await self._copy()
                    except (StoreError, OSError, TimeoutError):
                        continue  # still down: asked again later (the steps count outages)
                    if self._down_until is not None:
                        log.warning("store %s answers again", type(self.primary).__name__)
                        self._down_until = None
                    self._unanswered_since = None
        finally:
            if self._copier is scope:
                self._copier = None

    async def aclose(self) -> None:
        self._nursery = None
        if self._copier is not None:
            self._copier.cancel()
        try:
            await self.primary.aclose()
        finally:
            await self.fallback.aclose()


class _CallSteps(_Steps):
    """A `DegradingStore` as one call's steps see it (`DegradingStore.within`)."""

    __slots__ = ("deadline", "down", "store")

    def __init__(self, store: DegradingStore, deadline: float) -> None:
        self.store = store
        self.deadline = deadline
        self.down = False  # a step got no answer in time: the rest of this call's go to the fallback

    def limit(self) -> float:
        """Seconds the next step may wait for the primary."""
        store = self.store
        left = self.deadline - trio.current_time()
        if left == math.inf:
            return store.step_timeout
        return min(store.step_timeout, max(store.min_step, store.share * left))

    async def _step(self, op: str, *args: Any) -> Any:
        return await self.store._do(op, args, self)

    async def aclose(self) -> None:  # pragma: no cover - a call's view closes nothing
        pass
