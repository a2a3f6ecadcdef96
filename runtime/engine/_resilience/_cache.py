"""Cache: a read-only tool's earlier successes, served again (per principal unless shared).

A result is keyed by the tool, its canonical arguments and its principal (unless shared), never
by the caller's idempotency key (`call_key`). In this process (a MemoryStore) each tool keeps
`max_entries` results; room is made in the principal that wrote the most of them, its least
recently used first (`Kept`): one principal's flood of distinct calls evicts its own results,
never another's, and each principal is sure of `max_entries / principals` of them.
"""

from __future__ import annotations

import collections
from collections.abc import Generator, Iterator
from typing import Any

import trio

from ...messages import ResourceLinkPart, ToolResult, ToolSuccess
from ...stores import Store
from ...tools import ToolOptions
from .._policies import CallRequest, Policy, PolicyFlow, passes
from ._common import Shared, _decode, _event, _result_codec, args_key, call_key


class CachePolicy(Policy):
    """A read-only tool's successes, served again for `ttl` (per principal unless `shared`)."""

    def __init__(self, resilience: Shared, tool: str, options: ToolOptions) -> None:
        assert options.cache is not None
        self.r = resilience
        self.tool = tool
        self.cache = options.cache
        self.suspends = not resilience.local  # type: ignore[misc]
        self.entries = Kept(self.cache.max_entries)
        # (principal, arguments as the model wrote them) -> its key: a repeated call is found
        # without decoding or hashing it (`hit_by_text`, at the entry); kept on a MemoryStore only
        self.raw: dict[tuple[str, str], str] = {}
        self.hits = 0
        self.misses = 0
        self.personal = 0  # a shared cache's entries kept per principal (they link artifacts)

    @property
    def name(self) -> str:
        return "Cache"

    def intercept(self, request: CallRequest) -> PolicyFlow:
        if request.answered is not None:  # answered before it ran: nothing to keep, join or count
            return (yield from passes(request))
        shared = self.cache.shared
        key = call_key(request, self.tool, shared)
        store = self.r.store_for(request)
        hit = yield from self._get(key, store)
        if hit is None and shared and self.personal:  # a result that links its caller's artifacts
            hit = yield from self._get(call_key(request, self.tool), store)
        if hit is not None:
            self.hits += 1
            _event(request, "tool.cache", {"tool.cache.hit": True})
            return hit
        self.misses += 1
        _event(request, "tool.cache", {"tool.cache.hit": False})
        result: ToolResult = yield request
        if type(result) is ToolSuccess:
            who = "" if shared else (request.principal or "")
            if shared and _links_artifacts(result):
                # its artifacts are kept for this principal alone: a shared entry would hand
                # their handles to others, who may not read them. Kept as this principal's.
                key, who = call_key(request, self.tool), request.principal or ""
                self.personal += 1
            yield from self._put(key, result, store, request.principal or "")
            raw = request._call.call.arguments
            if self.r.local and type(raw) is str:
                self._alias(who, raw, key)
        return result

    def _alias(self, principal: str, raw: str, key: str) -> None:
        aliases = self.raw
        aliases[principal, raw] = key
        if len(aliases) > 2 * self.cache.max_entries:  # drop what points at nothing kept
            entries = self.entries
            self.raw = {k: v for k, v in aliases.items() if v in entries}

    def hit_by_text(self, principal: str | None, raw: str) -> ToolSuccess[Any] | None:
        """The kept result of a call whose arguments are this text, word for word (a MemoryStore
        only): what `intercept` would answer, without decoding or hashing the arguments."""
        key = self.raw.get(("" if self.cache.shared else (principal or ""), raw))
        if key is None and self.personal:
            key = self.raw.get((principal or "", raw))
        if key is None:
            return None
        entries = self.entries
        entry = entries.get(key)
        if entry is None or entry[0] <= trio.current_time():
            return None  # gone or expired: the call takes the whole path (which forgets it)
        entries.used(key, entry[2])
        self.hits += 1
        return entry[1]

    def _get(self, key: str, store: Store) -> Generator[Any, Any, ToolSuccess[Any] | None]:
        if self.r.local:
            entries = self.entries
            entry = entries.get(key)
            if entry is None:
                return None
            if entry[0] <= trio.current_time():
                entries.pop(key)
                return None
            entries.used(key, entry[2])
            return entry[1]
        data = yield from self.r.step(store.get(f"cache:{key}"))
        if data is None:
            return None
        found = _decode(data)
        return found if type(found) is ToolSuccess else None

    def _put(
        self, key: str, result: ToolSuccess[Any], store: Store, writer: str
    ) -> Generator[Any, Any, None]:
        if self.r.local:
            self.entries.put(key, trio.current_time() + self.cache.ttl, result, writer)
            return
        yield from self.r.step(store.set(f"cache:{key}", _result_codec.encode(result), self.cache.ttl))

    def invalidate(self, principal: str | None, args: Any) -> Generator[Any, Any, int]:
        """Forget this tool's results: all, a principal's (`principal`), or one call's (`args`:
        its decoded arguments, with `principal`). How many were forgotten."""
        shared = self.cache.shared
        who = "" if shared else (principal or "")
        if args is not None:
            keys = [args_key(self.tool, who, args)]
            if shared and self.personal:  # and the principal's own entry of it (it links artifacts)
                keys.append(args_key(self.tool, principal or "", args))
            forgotten = 0
            for key in keys:
                if self.r.local:
                    forgotten += self.entries.pop(key)
                else:
                    deleted: bool = yield from self.r.step(self.r.store.delete(f"cache:{key}"))
                    forgotten += deleted
            return forgotten
        prefix = f"{self.tool}\x00" if shared or principal is None else f"{self.tool}\x00{who}\x00"
        if self.r.local:
            doomed = [k for k in self.entries if k.startswith(prefix)]
            for k in doomed:
                self.entries.pop(k)
            return len(doomed)
        count: int = yield from self.r.step(self.r.store.delete_prefix(f"cache:{prefix}"))
        return count


def _links_artifacts(result: ToolSuccess[Any]) -> bool:
    """Whether a result links artifacts (kept for its principal: `runtime.engine._artifacts`)."""
    return any(type(p) is ResourceLinkPart and p.uri.startswith("artifact://") for p in result.parts)


class Kept:
    """A tool's cached results in this process: key -> (expires at, result, writer), at most
    `limit`. Each writer's (principal's) keys are kept least recently used first; when full,
    room is made in the writer that holds the most (as `MemoryStore` makes room), so one
    principal's distinct calls never evict another's results. Hits and puts cost O(1)."""

    __slots__ = ("_by_writer", "_data", "_largest", "_sizes", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._data: dict[str, tuple[float, ToolSuccess[Any], str]] = {}
        self._by_writer: dict[str, collections.OrderedDict[str, None]] = {}
        self._sizes: dict[int, set[str]] = {}  # how many keys -> the writers that hold that many
        self._largest = 0

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._data))

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: str) -> tuple[float, ToolSuccess[Any], str] | None:
        return self._data.get(key)

    def used(self, key: str, writer: str) -> None:
        """`key` was served: the last of its writer's to go."""
        self._by_writer[writer].move_to_end(key)

    def put(self, key: str, expires: float, result: ToolSuccess[Any], writer: str) -> None:
        data = self._data
        old = data.get(key)
        if old is not None:
            writer = old[2]  # written again (two misses ran at once): counted where it was
            data[key] = (expires, result, writer)
            self._by_writer[writer].move_to_end(key)
            return
        data[key] = (expires, result, writer)
        keys = self._by_writer.get(writer)
        if keys is None:
            keys = self._by_writer[writer] = collections.OrderedDict()
        keys[key] = None
        self._resize(writer, len(keys) - 1, len(keys))
        while len(data) > self.limit:
            largest = next(iter(self._sizes[self._largest]))
            self.pop(next(iter(self._by_writer[largest])))

    def pop(self, key: str) -> bool:
        """Forget `key`; whether it was kept."""
        entry = self._data.pop(key, None)
        if entry is None:
            return False
        writer = entry[2]
        keys = self._by_writer[writer]
        del keys[key]
        if not keys:
            del self._by_writer[writer]
        self._resize(writer, len(keys) + 1, len(keys))
        return True

    def _resize(self, writer: str, old: int, new: int) -> None:
        sizes = self._sizes
        if old:
            holders = sizes[old]
            holders.discard(writer)
            if not holders:
                del sizes[old]
        if new:
            sizes.setdefault(new, set()).add(writer)
            if new > self._largest:
                self._largest = new
        while self._largest and self._largest not in sizes:
            self._largest -= 1
