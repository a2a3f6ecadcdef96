"""What the resilience policies share: the store's codecs, keys of calls, and admission gates."""

from __future__ import annotations

import collections
import hashlib
import logging
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import trio

from ...messages import FailureKind, ToolFailure, ToolResult, ToolSuccess
from ...stores import Store
from .._policies import CallRequest, note

if TYPE_CHECKING:
    from .._call import Call
    from .._plan import ToolPlan


log = logging.getLogger("runtime.engine")


class Shared(Protocol):
    """What the resilience policies share: the runtime's `Resilience` (engine/_resilience)."""

    store: Store
    local: bool
    nursery: trio.Nursery | None
    readmit: Callable[[Call[ToolPlan], bool], None]

    def step(self, coro: Any) -> Generator[Any, Any, Any]:
        """A store step inside a policy flow: run in place (memory) or yielded to be awaited."""
        ...

    def store_for(self, request: CallRequest) -> Store:
        """The store as one call's steps use it: within the call's deadline."""
        ...


_result_codec = msgspec.json.Encoder(order="sorted")
_results = msgspec.json.Decoder(ToolSuccess | ToolFailure)


def _decode(data: bytes) -> ToolResult:
    result: ToolResult = _results.decode(data)
    return result


_canonical = msgspec.json.Encoder(order="sorted")
_json = msgspec.json.Decoder()


class Gate:
    """At most `limit` calls through at once (`Budget(per_batch=)`, `Budget(per_principal=)`).
    A call takes its gates in order when admitted and gives its place back when its work is
    over (not when it is answered: a call whose caller gave up still holds it while its code
    runs, as a mailbox slot is held). Beyond the limit a call waits in order, or, with
    `refusal`, fails OVERLOADED at once with that text."""

    __slots__ = ("__weakref__", "held", "limit", "readmit", "refusal", "waiting")

    def __init__(
        self, limit: int, readmit: Callable[[Call[ToolPlan], bool], None], refusal: str | None = None
    ) -> None:
        self.limit = limit
        self.held = 0
        self.readmit = readmit
        self.refusal = refusal
        self.waiting: collections.deque[tuple[Call[ToolPlan], bool]] = collections.deque()

    def enter(self, call: Call[ToolPlan], host: bool) -> bool:
        """Take a place, or wait for one (False: it is admitted when a place is free, or it was
        refused)."""
        if self.held >= self.limit:
            if self.refusal is not None:
                call.fail(FailureKind.OVERLOADED, self.refusal)
            else:
                self.waiting.append((call, host))
            return False
        self.held += 1
        return True

    def answered(self, call: Call[ToolPlan]) -> None:
        """`call` was answered while its work goes on: it keeps its place until that ends."""

    def given_up(self, call: Call[ToolPlan], result: ToolResult) -> None:
        """`call`'s work, handed over to others (`keeps`), is given up as the runtime stops."""

    def keeps(self, call: Call[ToolPlan]) -> bool:
        """`call`'s caller gives up: does its work go on for others (it is not cancelled)?"""
        return False

    def leave(self, call: Call[ToolPlan], result: ToolResult) -> None:
        self.held -= 1
        waiting = self.waiting
        while waiting and self.held < self.limit:
            call, host = waiting.popleft()
            if call.state.value == "queued":
                self.readmit(call, host)


def key_given(request: CallRequest) -> str | None:
    """The call's key as its caller names it (`idempotency_key` in its metadata), if it does."""
    given = request._call.metadata.get("idempotency_key") if request._call.metadata else None
    if given is None and request._call.ctx is not None:
        given = request._call.ctx.metadata.get("idempotency_key")
    return given if isinstance(given, str) and given else None


def key_of(request: CallRequest, tool: str, shared: bool = False) -> str:
    """The key of a call to run once (Dedupe): its caller's `idempotency_key` (in the call's
    metadata) when it gives one, which names one operation whatever its arguments say (a
    retry the model worded anew), within its principal; else its arguments' key (`call_key`)."""
    given = key_given(request)
    if given is not None:
        principal = "" if shared else (request.principal or "")
        return f"{tool}\x00{principal}\x00k:{given}"
    return call_key(request, tool, shared)


def call_key(request: CallRequest, tool: str, shared: bool = False) -> str:
    """(tool, canonical arguments, principal unless `shared`) as a short key: what a cached
    result answers. Never the caller's idempotency key: a key names an operation its caller
    may retry, not its arguments, and callers choose keys as they like (a request id, a
    counter another tenant uses too), so a result keyed by it would answer other arguments."""
    principal = "" if shared else (request.principal or "")
    args = request.args
    if args is None:
        raw = request.arguments
        args = _json.decode(raw) if isinstance(raw, str | bytes) else raw
    return args_key(tool, principal, args)


def args_key(tool: str, principal: str, args: Any) -> str:
    """The key of decoded arguments (a Struct: its defaults count, its field order does not)."""
    digest = hashlib.blake2b(_canonical.encode(args), digest_size=16).hexdigest()
    return f"{tool}\x00{principal}\x00{digest}"


def _event(request: CallRequest, name: str, attributes: dict[str, Any]) -> None:
    note(request._call, name, attributes)
