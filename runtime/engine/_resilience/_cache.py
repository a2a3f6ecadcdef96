"""Cache: a read-only tool's earlier successes, served again (per principal unless shared)."""

from __future__ import annotations

import collections
from collections.abc import Generator
from typing import Any

import trio

from ...messages import ResourceLinkPart, ToolResult, ToolSuccess
from ...stores import Store
from ...tools import ToolOptions
from .._policies import CallRequest, Policy, PolicyFlow, passes
from ._common import Shared, _decode, _event, _result_codec, args_key, key_given, key_of


class CachePolicy(Policy):
    """A read-only tool's successes, served again for `ttl` (per principal unless `shared`)."""

    def __init__(self, resilience: Shared, tool: str, options: ToolOptions) -> None:
        assert options.cache is not None
        self.r = resilience
        self.tool = tool
        self.cache = options.cache
        self.suspends = not resilience.local  # type: ignore[misc]
        self.entries: collections.OrderedDict[str, tuple[float, ToolSuccess[Any]]] = collections.OrderedDict()
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
        key = key_of(request, self.tool, shared)
        store = self.r.store_for(request)
        hit = yield from self._get(key, store)
        if hit is None and shared and self.personal:  # a result that links its caller's artifacts
            hit = yield from self._get(key_of(request, self.tool), store)
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
                key, who = key_of(request, self.tool), request.principal or ""
                self.personal += 1
            yield from self._put(key, result, store)
            raw = request._call.call.arguments
            if self.r.local and type(raw) is str and key_given(request) is None:
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
        entry = self.entries.get(key)
        if entry is None or entry[0] <= trio.current_time():
            return None  # gone or expired: the call takes the whole path (which forgets it)
        self.entries.move_to_end(key)
        self.hits += 1
        return entry[1]

    def _get(self, key: str, store: Store) -> Generator[Any, Any, ToolSuccess[Any] | None]:
        if self.r.local:
            entry = self.entries.get(key)
            if entry is None:
                return None
            if entry[0] <= trio.current_time():
                del self.entries[key]
                return None
            self.entries.move_to_end(key)
            return entry[1]
        data = yield from self.r.step(store.get(f"cache:{key}"))
        if data is None:
            return None
        found = _decode(data)
        return found if type(found) is ToolSuccess else None

    def _put(self, key: str, result: ToolSuccess[Any], store: Store) -> Generator[Any, Any, None]:
        if self.r.local:
            entries = self.entries
            entries[key] = (trio.current_time() + self.cache.ttl, result)
            entries.move_to_end(key)
            while len(entries) > self.cache.max_entries:
                entries.popitem(last=False)
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
                    forgotten += self.entries.pop(key, None) is not None
                else:
                    deleted: bool = yield from self.r.step(self.r.store.delete(f"cache:{key}"))
                    forgotten += deleted
            return forgotten
        prefix = f"{self.tool}\x00" if shared or principal is None else f"{self.tool}\x00{who}\x00"
        if self.r.local:
            doomed = [k for k in self.entries if k.startswith(prefix)]
            for k in doomed:
                del self.entries[k]
            return len(doomed)
        count: int = yield from self.r.step(self.r.store.delete_prefix(f"cache:{prefix}"))
        return count


def _links_artifacts(result: ToolSuccess[Any]) -> bool:
    """Whether a result links artifacts (kept for its principal: `runtime.engine._artifacts`)."""
    return any(type(p) is ResourceLinkPart and p.uri.startswith("artifact://") for p in result.parts)
