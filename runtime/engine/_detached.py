"""Calls that outlive a request and a process: detached calls, deferred calls, and their journal.

A detached call (`rt.detach(call)`) is answered with a handle at once and runs in a task of the
runtime; a deferred call (a policy's `request.defer`, a tool's `ctx.defer`, a `requires_approval`
tool no one can approve now) ends its caller's turn with a `ToolPending` and waits for an
approval, or for its result from outside. Both are records of one journal (engine/_journal.py)
in the runtime's store, which the `Book` here keeps:

    detach / defer     the record is written before the caller hears of it (a handle, a
                       ToolPending): what the caller holds is always in the journal
    run                the entry's own steps (prepare, the policies' and features' starting
                       flow, admit, wait, finish): one result, deadlines, policies, spans (linked
                       to the starter's); the started mark is written right before admission
    questions          the tool's `ctx.elicit` (and `ctx.sample` / `ctx.list_roots` when the
                       runtime has no handler of its own) wait in the record for an answer
                       (`DetachedCall.answer`, from any process), each under its key: questions
                       asked at once are open together, and each is answered on its own
    the verbs          approve (the approving process runs it), deny, expire, supply, cancel:
                       each one compare-and-set of the record, so each happens once whoever asks
    recovery           a process that stopped renewing its lease (killed) is gone: the calls it
                       ran are taken over by another process (or its restart): not started: run;
                       started: run again only when the tool is idempotent, else answered
                       UNAVAILABLE saying it may have run (never run twice)

The application's face of it is `DetachedCall` (and `BlockingDetachedCall` in runtime.embed),
from the call surface (`Calls.detach`, `Calls.detached`, `Calls.pending`, `Calls.detached_calls`).
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import logging
import math
import os
import re
import socket
import time
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import msgspec
import sniffio
import trio

from ..exceptions import (
    CallNotFound,
    CallStateError,
    CannotAsk,
    InvalidArguments,
    ResultTypeError,
    RuntimeClosed,
    ToolOverloaded,
)
from ..messages import FailureKind, ToolCall, ToolFailure, ToolPending, ToolResult, ToolSuccess, echo
from ..stores import Store, StoreError
from ..tools import Answer, CallContext, Elicitation, Root, RootsRequest, Sampled, Sampling, asking
from ._call import DONE, QUEUED, REPORTED, Call
from ._entry import Entry
from ._journal import (
    APPROVAL_KEY,
    ID,
    DetachedStatus,
    Journal,
    OpenQuestion,
    Record,
    check_lookup,
    count_key,
    detached_run,
    failure_of,
    lease_key,
    marker_key,
    new_id,
    principal_of,
    principal_prefix,
    question_key,
    record_key,
    status_of,
    unwritable,
)
from ._options import Durable
from ._plan import ToolPlan
from ._scope import Scope
from ._supervisor import RegistryActor

__all__ = ["Book", "DetachedCall", "Run", "answered_before"]

log = logging.getLogger("runtime.engine")

Runner = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]
"""How a surface's callers run the book's steps (a driver's `run`: here, or through trio)."""

_NOTHING: Any = object()
_LINK = "tool_runtime.link"  # runtime.tracing.LINK: the span of a detached call links to this
_CANCEL_WAIT = 5.0  # seconds `cancel` waits for a local run to end before it answers
_END_WITHIN = 10.0  # seconds a run's end may take to be journaled (shielded: its result is not lost)
_CLOSE_GRACE = 2.0
_MARKER_GRACE = 60.0  # seconds a live marker may wait for its record (a write in progress)  # seconds a closing book waits for its runs, once the runtime's calls are answered
_RECOUNT_EVERY = 8  # sweeps between two recounts of the principals' live entries
_PATH = re.compile(r"`(\$[^`]*)`")

_given: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "runtime_detached_answers", default=None
)


@contextlib.contextmanager
def answered_before(answers: Mapping[str, Any]) -> Iterator[None]:
    """Calls detached in this block start with `answers` to questions their tools will ask (by
    the questions' keys, `question_key`; each value the answer's `to_builtins` form): a question
    whose answer is there is answered at once, not asked. The MCP server detaches a call whose
    tool asked its first questions in the request (`ctx.background()`) with their answers."""
    token = _given.set(dict(answers))
    try:
        yield
    finally:
        _given.reset(token)


class Run:
    """One detached call this process runs (its record, its entry call, its questions)."""

    __slots__ = (
        "asked",
        "call",
        "disowned",
        "done",
        "given",
        "key",
        "lock",
        "raw",
        "record",
        "scope",
        "times",
        "user_cancelled",
    )

    def __init__(self, record: Record, raw: bytes | None = None) -> None:
        self.record = record
        self.raw = raw  # its bytes as last read or written here (None: read it first)
        self.key = record.key
        self.call: Call[ToolPlan] | None = None
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        self.lock = trio.Lock()  # its questions' journal writes, one at a time
        self.asked: dict[str, trio.Event] = {}  # key -> set once its answer is delivered
        self.given: dict[str, Any] = {}  # key -> the answer delivered, until its question takes it
        self.times: dict[str, int] = {}  # a question's key (`question_key`) -> how often it was asked
        self.disowned = False  # another process took it over: its end is not ours to write
        self.user_cancelled = False

    @property
    def known(self) -> tuple[bytes, Record] | None:
        return (self.raw, self.record) if self.raw is not None else None

    def now_is(self, record: Record | None, raw: bytes | None) -> None:
        if record is not None and raw is not None and record.version >= self.record.version:
            self.record, self.raw = record, raw

    def hand_over(self, handed: bool) -> None:
        """Tell its tool whether the run stops without ending here (`CallContext.handed_over`)."""
        ctx = self.call.ctx if self.call is not None else None
        if ctx is not None:
            ctx.handed_over = handed

    def deliver(self, key: str, answer: Any) -> None:
        """The answer to its question `key` is here (ignored if it asks no such question now)."""
        event = self.asked.get(key)
        if event is not None and not event.is_set():
            self.given[key] = answer
            event.set()


class Book:
    """The journal of one runtime's detached and deferred calls, and the service that keeps it
    (see the module docstring).

    Args:
        entry: the engine's entry (a run takes its steps).
        routing: the registry actor (a tool's plan: its arguments' decoder, its result's shape).
        store: where the records live (the runtime's store; a `DegradingStore`'s primary: a
            journal never falls back to memory, which another process could not see).
        options: the runtime's `Durable`.
        local: the store is a `MemoryStore` (its steps never suspend).
    """

    def __init__(
        self, entry: Entry, routing: RegistryActor, store: Store, options: Durable, *, local: bool
    ) -> None:
        self.entry = entry
        self.routing = routing
        self.store = store
        self.journal = Journal(store)
        self.options = options
        self.local = local
        self.node = options.node or f"{socket.gethostname()[:40]}-{os.getpid()}"
        self.owner = f"{self.node}/{os.urandom(6).hex()}"
        self.runs: dict[str, Run] = {}
        self.closing = False
        self._nursery: trio.Nursery | None = None
        self._context: contextvars.Context | None = None
        self._keeping = False
        self._stop = trio.CancelScope()
        self._served = trio.Event()
        self._closed = trio.Event()
        self._changed = trio.Event()
        self._wall0 = time.time()
        self._trio0 = trio.current_time()
        self._warned = False
        self.unsupported: str | None = None
        if not callable(getattr(store, "swap", None)):
            self.unsupported = (
                f"the runtime's store ({type(store).__name__}) has no swap(): detached and deferred "
                "calls need its compare-and-set (runtime.stores has it: MemoryStore, SQLiteStore, RedisStore)"
            )

    # -- time and change --------------------------------------------------------------

    def now(self) -> float:
        """Wall-clock seconds since the epoch, moving with trio's clock (a MockClock moves it)."""
        return self._wall0 + (trio.current_time() - self._trio0)

    def _bump(self) -> None:
        """Something changed here: whoever waits for a change looks again."""
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    async def _wait_change(self) -> None:
        """Until something changes here, or a poll interval (another process's change)."""
        with trio.move_on_after(self.options.poll_interval):
            await self._changed.wait()

    # -- the service --------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the book: recover what the journal holds, then keep the lease, the sweep and the
        watch while there is something to keep; returns once closed and its runs have ended."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._context = contextvars.copy_context()  # runs start here, not in a caller's
                try:
                    if self.unsupported is None:
                        await self._recover(recount=True)
                except (StoreError, OSError) as exc:
                    self._store_failed("recovering", exc)
                except Exception:  # a bug here must not keep the runtime from opening
                    log.exception("detached calls: recovery failed")
                task_status.started()
                await self._closed.wait()  # then its nursery waits for its runs to end
        finally:
            self._served.set()

    def close(self) -> None:
        """No new work; what ends from now on because the runtime stops is left to recovery."""
        self.closing = True
        for run in self.runs.values():
            if not run.user_cancelled:
                run.hand_over(True)

    async def aclose(self) -> None:
        """Stop the service once the runtime's calls have ended, and give up the lease (so a
        restart or another process recovers what is left at once)."""
        self.closing = True
        self._closed.set()
        self._stop.cancel()
        if self._nursery is None:
            return  # it never served (the runtime failed to open)
        with trio.CancelScope(shield=True):
            with trio.move_on_after(_CLOSE_GRACE):
                await self._served.wait()  # its runs have ended (the runtime answered their calls)
            if self._keeping:
                with trio.move_on_after(1.0), contextlib.suppress(StoreError, OSError):
                    await self.store.delete(lease_key(self.owner))

    async def _own(self) -> None:
        """Before this process takes a call as its own: its lease is in the store (no other
        process may take it for gone in between)."""
        if not self._keeping:
            await self.store.set(lease_key(self.owner), b"1", self.options.lease)
            self._ensure_keeping()

    def _ensure_keeping(self) -> None:
        """The journal is in use here: keep the lease, sweep, watch (once, until closed)."""
        if self._keeping or self.closing or self._nursery is None:
            return
        self._keeping = True
        self._start(self._keep)

    def _start(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start `fn` in the book's nursery, in the book's own context (not its caller's: a
        detached call outlives the request, its `asking` and `reporting` blocks, its span)."""
        assert self._nursery is not None
        assert self._context is not None
        self._context.copy().run(self._nursery.start_soon, fn, *args)

    async def _keep(self) -> None:
        options = self.options
        every_lease = options.lease / 3
        every_sweep = options.lease / 2
        tick = min(options.poll_interval, every_lease)
        sweeps = 0
        with self._stop:
            await self._renew()
            next_lease = trio.current_time() + every_lease
            next_sweep = trio.current_time() + every_sweep
            while True:
                await trio.sleep(tick if self.runs else min(every_lease, every_sweep))
                now = trio.current_time()
                try:
                    if now >= next_lease:
                        next_lease = now + every_lease
                        await self._renew()
                    if self.runs:
                        await self._watch()
                    if now >= next_sweep:
                        next_sweep = now + every_sweep
                        sweeps += 1
                        await self._recover(recount=sweeps % _RECOUNT_EVERY == 0)
                except (StoreError, OSError) as exc:
                    self._store_failed("keeping the journal", exc)
                except Exception:  # a bug here must never stop the runtime
                    log.exception("detached calls: keeping the journal failed")

    async def _renew(self) -> None:
        try:
            await self.store.set(lease_key(self.owner), b"1", self.options.lease)
        except (StoreError, OSError) as exc:
            self._store_failed("renewing its lease", exc)

    def _store_failed(self, what: str, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            log.warning("detached calls: the store failed while %s: %s", what, exc)

    async def _watch(self) -> None:
        """What another process changed in the records of the calls this one runs: a cancel, an
        answer to a question, or the call taken over (this process was taken for gone)."""
        for key, run in list(self.runs.items()):
            _, record = await self.journal.read(key)
            if (
                record is None
                or record.phase == "done"
                or (record.owner != self.owner and record.phase != "waiting")
            ):
                if not run.disowned and run.call is not None:
                    run.disowned = True
                    run.hand_over(True)
                    run.scope.cancel()
                continue
            if record.cancel and not run.user_cancelled:
                run.user_cancelled = True
                run.hand_over(False)
                run.scope.cancel()
            elif run.asked:
                for key, answer in record.answers.items():
                    run.deliver(key, answer)

    async def _recover(self, *, recount: bool = False) -> None:
        """One pass over the live records: expire what waited too long, take over what a gone
        process ran, and (now and then) recount each principal's live records."""
        markers = await self.store.keys("dca:\x00")
        live: collections.Counter[str | None] = collections.Counter()
        gone: dict[str, bool] = {}
        for marker in markers:
            parts = marker.split("\x00")
            if len(parts) != 3:
                continue
            principal = principal_of(parts[1])
            key = record_key(principal, parts[2])
            raw, record = await self.journal.read(key)
            if record is None:  # its maker died between the two writes, or is between them now
                if await self._stale(marker):
                    await self.store.delete(marker)
                continue
            if record.phase == "done":
                await self.store.delete(marker)
                continue
            live[principal] += 1
            self._ensure_keeping()
            if record.phase == "waiting" and record.waiting != "answer":
                if record.expires is not None and record.expires <= self.now():
                    await self._expired(record, raw)
                continue
            if record.owner == self.owner:
                if record.key in self.runs or self.now() - record.updated < self.options.lease:
                    continue
                # Ours, yet not run here: the store made a write after this process stopped
                # waiting for its answer (an approval or a detach that raised StoreError, which
                # a retry then found done): run it as a gone process's call is.
            elif not await self._gone(record.owner, gone):
                continue
            await self._take_over(record, raw)
        if recount:
            for counted in await self.store.keys("dcn:\x00"):
                principal = principal_of(counted.partition("\x00")[2])
                if principal not in live:
                    await self.store.set(counted, b"0")
            for principal, n in live.items():
                await self.store.set(count_key(principal), str(n).encode())

    async def _stale(self, marker: str) -> bool:
        """A marker with no record is left over once it is older than any write in progress."""
        written = await self.store.get(marker)
        try:
            since = float(written) if written else 0.0
        except ValueError:
            since = 0.0
        return self.now() - since > _MARKER_GRACE

    async def _mark(self, principal: str | None, detached_id: str) -> None:
        """The live marker, written before its record (a record is never left unmarked)."""
        await self.store.set(marker_key(principal, detached_id), repr(self.now()).encode())

    async def _gone(self, owner: str | None, seen: dict[str, bool]) -> bool:
        """Whether the process `owner` is gone: its lease ran out, or it is an earlier run of
        this process's own node."""
        if owner is None:
            return True
        known = seen.get(owner)
        if known is None:
            node = owner.rpartition("/")[0]
            mine = self.options.node is not None and node == self.node  # an earlier run of this node
            known = (mine and owner != self.owner) or (await self.store.get(lease_key(owner)) is None)
            seen[owner] = known
        return known

    def _repeatable(self, record: Record) -> bool:
        actor = self.routing.actor(record.tool)
        return actor.plan.options.repeatable if actor is not None else record.idempotent

    async def _take_over(self, record: Record, raw: bytes | None) -> None:
        """A call whose process is gone: run it here (not started yet, or idempotent), or answer
        it (cancelled, past its deadline, or started and not idempotent: it may have run)."""
        was = record.owner
        repeatable = self._repeatable(record)
        await self._own()
        now = self.now()
        tool = record.tool

        def change(r: Record) -> Record | None:
            if r.phase == "done" or (r.phase == "waiting" and r.waiting != "answer") or r.owner != was:
                return None
            may = " (it may have run)" if r.started else ""
            if r.cancel:
                return self._ended(r, failure_of(r, FailureKind.CANCELLED, f"the call was cancelled{may}"))
            if r.deadline is not None and r.deadline <= now:
                return self._ended(
                    r,
                    failure_of(
                        r, FailureKind.TIMEOUT, f"tool {tool!r} did not finish within its deadline{may}"
                    ),
                )
            if not r.started or repeatable or r.checkpoint:  # a checkpoint: its tool resumes
                return msgspec.structs.replace(
                    r, phase="queued", owner=self.owner, waiting=None, questions={}, answers={},
                    updated=now,
                )  # fmt: skip
            return self._ended(
                r,
                failure_of(
                    r,
                    FailureKind.UNAVAILABLE,
                    f"the process running tool {tool!r} stopped before the call ended; it may have "
                    "run, and it is not run again (the tool is not idempotent)",
                ),
            )

        new, changed, new_raw = await self.journal.change(
            record.key, change, self.options.ttl, _known(raw, record)
        )
        if not changed or new is None:
            return
        log.info("detached call %s (tool %r): taken over from %s (%s)", new.id, tool, was, new.phase)
        if new.phase == "queued":
            self._spawn(new, None, new_raw)
        else:
            await self._after_end(new)

    # -- records ----------------------------------------------------------------------

    def _ended(self, record: Record, result: ToolResult, decision: str | None = None) -> Record:
        """`record` done with `result` (kept `ttl` seconds from now)."""
        now = self.now()
        message = result.content if type(result) is ToolFailure else None
        return msgspec.structs.replace(
            record, phase="done", result=result, owner=None, waiting=None, questions={},
            answers={}, cancel=False, message=message, updated=now,
            expires=now + record.ttl, decision=decision if decision is not None else record.decision,
        )  # fmt: skip

    async def _after_end(self, record: Record) -> None:
        """A record that this process made done: off the live list, out of its principal's count."""
        self._bump()
        try:
            await self.store.delete(marker_key(record.principal, record.id))
            await self.store.incr(count_key(record.principal), -1)
        except (StoreError, OSError) as exc:  # the next recount heals it
            self._store_failed("ending a call", exc)

    async def _read(self, detached_id: object, principal: object) -> tuple[bytes | None, Record]:
        """The record of `detached_id` for `principal` (a waiting one past its time expired now).

        Raises:
            CallNotFound: none for this principal.
        """
        detached_id, principal = check_lookup(detached_id, principal)
        if self.unsupported is not None:
            raise TypeError(self.unsupported)
        raw, record = await self.journal.read(record_key(principal, detached_id))
        if record is None or record.principal != principal or record.id != detached_id:
            raise CallNotFound(detached_id)
        if record.phase != "done":
            self._ensure_keeping()  # a live call is looked at here: this process sweeps too
        if (
            record.phase == "waiting"
            and record.waiting != "answer"
            and record.expires is not None
            and record.expires <= self.now()
        ):
            record = await self._expired(record, raw)
        return raw, record

    def status(self, record: Record) -> DetachedStatus:
        return status_of(record, self.options.poll_interval)

    async def _expired(self, record: Record, raw: bytes | None, *, force: bool = False) -> Record:
        """A waiting record past its time (or withdrawn now: `force`): done, TIMEOUT (whoever
        sees it first writes it)."""
        now = self.now()
        waited = f"{max(0.0, now - record.created):.0f}s"
        tool = record.tool

        def change(r: Record) -> Record | None:
            if r.phase != "waiting" or r.waiting == "answer":
                return None
            if not force and (r.expires is None or r.expires > now):
                return None
            if r.waiting == "approval":
                text = f"the approval of tool {tool!r} did not come in time (it expired after {waited}); it did not run"
            else:
                text = f"the result of tool {tool!r} did not come from outside in time (it expired after {waited})"
            return self._ended(r, failure_of(r, FailureKind.TIMEOUT, text), "expired")

        new, changed, _ = await self.journal.change(record.key, change, self.options.ttl, _known(raw, record))
        if changed and new is not None:
            await self._after_end(new)
        return new if new is not None else record

    # -- starting -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.unsupported is not None:
            raise TypeError(self.unsupported)
        self.entry.check_open()
        if self.closing or self.entry.closing:
            raise RuntimeClosed("the runtime is shutting down; no call can be detached")

    async def _count_in(self, principal: str | None) -> None:
        """Take a place in the principal's bound.

        Raises:
            ToolOverloaded: the principal has `max_per_principal` live calls already.
        """
        limit = self.options.max_per_principal
        key = count_key(principal)
        if await self.store.incr(key, 1) > limit:
            await self.store.incr(key, -1)
            raise ToolOverloaded(
                f"principal {principal!r} already has {limit} detached and pending calls (its bound); "
                "retry when one ends"
            )

    def _record(
        self,
        call: ToolCall,
        principal: str | None,
        metadata: Mapping[str, Any] | None,
        detached_id: str,
        **fields: Any,
    ) -> Record:
        now = self.now()
        arguments = call.arguments
        if not isinstance(arguments, str):
            try:
                arguments = msgspec.json.encode(arguments).decode()
            except (TypeError, ValueError, RecursionError) as exc:
                # not JSON (or nested past what can be written): the run answers INVALID_ARGUMENTS
                arguments = f"<arguments that cannot be journaled: {type(exc).__name__}>"
        name = call.name if isinstance(call.name, str) else echo(call.name)
        actor = self.routing.actor(name)
        return Record(
            id=detached_id,
            principal=principal,
            tool=name,
            call_id=call.id if isinstance(call.id, str) else echo(call.id),
            arguments=arguments,
            metadata=_portable(metadata),
            idempotent=actor.plan.options.repeatable if actor is not None else False,
            created=now,
            updated=now,
            ttl=self.options.ttl,
            link=_link(metadata),
            **fields,
        )

    async def detach(
        self,
        call: ToolCall,
        metadata: Mapping[str, Any] | None,
        timeout: float | None,
        principal: str | None,
        scope: Scope | None,
        detached_id: str | None,
    ) -> tuple[str, str | None]:
        """Journal `call` as a detached call and start it; its id and principal (an `id` that
        exists for this principal already: that call, not a second one).

        Raises:
            ValueError: `id` is not 1-128 letters, digits and `_.:-`; a principal with a NUL.
            ToolOverloaded: the principal is at its bound.
            StoreError: the journal could not be written (nothing was started).
            RuntimeClosed: the runtime is closed or shutting down.
        """
        self._check_open()
        if principal is None and scope is not None:
            principal = scope.principal
        if principal is not None and (not isinstance(principal, str) or "\x00" in principal):
            raise ValueError("a principal is a string without NUL characters")
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        if detached_id is None:
            detached_id = new_id()
        elif not isinstance(detached_id, str) or not ID.fullmatch(detached_id):
            raise ValueError(f"a detached call's id is 1-128 letters, digits and '_.:-', not {detached_id!r}")
        else:
            _, existing = await self.journal.read(record_key(principal, detached_id))
            if existing is not None:
                if existing.phase != "done":
                    await self._mark(principal, detached_id)  # a retry heals a lost marker too
                return detached_id, principal
        now = self.now()
        record = self._record(
            call,
            principal,
            metadata,
            detached_id,
            phase="queued",
            owner=self.owner,
            answers=dict(_given.get() or {}),
            timeout=timeout,
            deadline=None if timeout is None else now + timeout,
        )
        why = unwritable(record)
        if why is not None:
            raise ValueError(f"detached call {detached_id!r}: {why}")
        await self._own()
        await self._count_in(principal)
        try:
            await self._mark(principal, detached_id)
            created = await self.journal.create(record)
        except BaseException:
            with (
                trio.CancelScope(shield=True),
                trio.move_on_after(1.0),
                contextlib.suppress(StoreError, OSError),
            ):
                await self.store.incr(count_key(principal), -1)
            raise
        if created is None:  # the same id, made just now by another caller: that call
            await self.store.incr(count_key(principal), -1)
            return detached_id, principal
        self._spawn(record, scope, created)
        return detached_id, principal

    def _spawn(self, record: Record, scope: Scope | None, raw: bytes | None = None) -> None:
        run = Run(record, raw)
        self.runs[record.key] = run
        self._ensure_keeping()
        self._start(self._run, run, scope)

    # -- a run ----------------------------------------------------------------------------

    async def _run(self, run: Run, scope: Scope | None) -> None:
        result: ToolResult | None = None
        try:
            with run.scope:
                result = await self._drive(run, scope)
            if result is None and run.call is not None and run.call.settled:
                result = run.call.result
            await self._end_run(run, result)
        except (StoreError, OSError) as exc:
            self._store_failed("ending a call", exc)
        except Exception:  # a bug here must never stop the runtime; recovery answers the call
            log.exception("detached call %s failed in the runtime", run.record.id)
        finally:
            self.runs.pop(run.key, None)
            run.done.set()
            self._bump()

    def _askers(self, run: Run) -> dict[str, Any]:
        """Who answers the questions of a detached call: the journal (`DetachedCall.answer`),
        except sampling and roots when the runtime has handlers for them (services, not a
        person who left with the request)."""
        own = self.entry.asking

        async def on_elicit(question: Elicitation) -> Answer:
            answer: Answer = await self._ask(run, "elicitation", question)
            return answer

        async def on_sample(question: Sampling) -> Sampled:
            sampled: Sampled = await self._ask(run, "sampling", question)
            return sampled

        async def on_roots(question: RootsRequest) -> list[Root]:
            roots: list[Root] = await self._ask(run, "roots", question)
            return roots

        handlers: dict[str, Any] = {"on_elicit": on_elicit}
        if own is None or own.on_sample is None:
            handlers["on_sample"] = on_sample
        if own is None or own.on_roots is None:
            handlers["on_roots"] = on_roots
        return handlers

    def _deadline(self, record: Record) -> tuple[float, float | None]:
        """The call's trio deadline and its timeout (what the TIMEOUT message names)."""
        if record.deadline is None:
            return math.inf, None
        left = record.deadline - self.now()
        return trio.current_time() + max(0.0, left), record.timeout

    async def _drive(self, run: Run, scope: Scope | None) -> ToolResult | None:
        """The call through the entry's steps, as a trio caller's `rt.call` takes them, with its
        started mark written right before admission."""
        entry = self.entry
        record = run.record
        token = detached_run.set(run)
        try:
            with asking(**self._askers(run)):
                metadata = dict(record.metadata)
                if record.link is not None:
                    metadata[_LINK] = record.link
                deadline, timeout = self._deadline(record)
                call = ToolCall(id=record.call_id, name=record.tool, arguments=record.arguments)
                c = entry.prepare(call, metadata, deadline, timeout, principal=record.principal, scope=scope)
                run.call = c
                ctx = entry.context_of(c)
                ctx.approved = record.approved
                ctx.detached_id = record.id
                if record.checkpoint:  # where a run before this one left its work
                    ctx.resumed = types.MappingProxyType(dict(record.checkpoint))
                try:
                    await entry.start(c)
                    await trio.lowlevel.checkpoint_if_cancelled()
                    if c.state is QUEUED:
                        refused = await self._started(run)
                        if refused is not None:
                            c.settle(refused)
                        elif c.state is QUEUED and not entry.admit(c):
                            await entry._wait_room(c)
                    state = c.state
                    if state is not DONE and state is not REPORTED:
                        await entry._wait_timed(c)
                except BaseException:
                    await entry.cancelled([c])
                    raise
                await entry.finish(c)
                return c.result
        finally:
            detached_run.reset(token)

    async def _started(self, run: Run) -> ToolFailure | None:
        """Mark the call started (its tool's code may begin): None, or why it must not run."""
        now = self.now()
        owner = self.owner

        def change(r: Record) -> Record | None:
            if r.phase != "queued" or r.owner != owner or r.cancel:
                return None
            return msgspec.structs.replace(
                r, phase="running", started=True, attempts=r.attempts + 1, updated=now
            )

        record = run.record
        try:
            new, changed, raw = await self.journal.change(run.key, change, self.options.ttl, run.known)
        except (StoreError, OSError) as exc:
            self._store_failed("starting a call", exc)
            run.disowned = True  # not started: left queued, recovery runs it
            return failure_of(record, FailureKind.UNAVAILABLE, f"the journal could not be written: {exc}")
        if changed and new is not None:
            run.now_is(new, raw)
            return None
        if new is not None and new.cancel and new.owner == owner:
            run.user_cancelled = True
            return failure_of(record, FailureKind.CANCELLED, "the call was cancelled before it ran")
        run.disowned = True  # another process has it now (this one was taken for gone)
        return failure_of(record, FailureKind.UNAVAILABLE, "the call was taken over by another process")

    async def _end_run(self, run: Run, result: ToolResult | None) -> None:
        """Journal a run's one result (a deferral's record waits already; what ends because the
        runtime stops is left to recovery; a run taken over is another process's to end)."""
        if run.disowned or result is None:
            return
        record = run.record
        if type(result) is ToolPending:
            if result.detached_id == record.id:
                return
            result = failure_of(record, FailureKind.UNAVAILABLE, "the call was deferred as another call")
        if (
            self.closing
            and not run.user_cancelled
            and type(result) is ToolFailure
            and result.kind in (FailureKind.UNAVAILABLE, FailureKind.CANCELLED)
        ):
            return  # the runtime stops: the next process (or its restart) takes it over
        owner = self.owner
        final = result

        def change(r: Record) -> Record | None:
            if r.phase == "done" or r.owner != owner:
                return None
            return self._ended(r, final)

        if self.local:  # a MemoryStore's steps never suspend: nothing can cut them short
            await self._end(run, change)
        else:
            with trio.CancelScope(shield=True), trio.move_on_after(_END_WITHIN):
                await self._end(run, change)

    async def _end(self, run: Run, change: Callable[[Record], Record | None]) -> None:
        new, changed, _ = await self.journal.change(run.key, change, self.options.ttl, run.known)
        if changed and new is not None:
            await self._after_end(new)

    async def _ask(self, run: Run, kind: Literal["elicitation", "sampling", "roots"], question: Any) -> Any:
        """A question of the running call: in its record, under its key, until an answer comes
        (from any process). Questions asked at once are open together; an answer given before
        the question is asked (a call detached with the answers an MCP client gave already:
        `detach(..., answers=...)`) is taken at once."""
        asked = msgspec.to_builtins(question)
        base = question_key(kind, asked)
        owner = self.owner
        key = base
        taken: list[Any] = []  # the answer it found in the record, if any
        async with run.lock:
            now = self.now()
            nth = run.times[base] = run.times.get(base, 0) + 1
            # its answer given before it was asked: under its key the first time it is asked, then
            # `key-2`, `key-3`... (as the MCP server keys a question the tool asks again)
            before = base if nth == 1 else f"{base}-{nth}"

            def change(r: Record) -> Record | None:
                nonlocal key
                asking = r.phase in ("queued", "running") or (r.phase == "waiting" and r.waiting == "answer")
                if not asking or r.owner != owner:
                    return None
                key = _free_key(base, r, run.asked)
                taken.clear()
                if before in r.answers and before not in r.questions and before not in run.asked:
                    taken.append(r.answers[before])  # answered before it was asked
                    answers = {k: v for k, v in r.answers.items() if k != before}
                    return msgspec.structs.replace(r, answers=answers, updated=now)
                questions = {**r.questions, key: OpenQuestion(kind=kind, question=asked)}
                return msgspec.structs.replace(
                    r, phase="waiting", waiting="answer", questions=questions, updated=now
                )

            new, changed, raw = await self.journal.change(run.key, change, self.options.ttl, run.known)
            if not changed or new is None:
                raise CannotAsk("the detached call's journal entry changed; the question cannot be asked")
            run.now_is(new, raw)
            if taken:
                return _decode_answer(kind, taken[0])
            answered = run.asked[key] = trio.Event()
        self._bump()
        try:
            await answered.wait()
            answer = run.given.pop(key)

            def clear(r: Record) -> Record | None:
                if key not in r.answers:
                    return None
                return msgspec.structs.replace(r, answers={k: v for k, v in r.answers.items() if k != key})

            try:
                async with run.lock:
                    cleared, _, raw = await self.journal.change(run.key, clear, self.options.ttl)
                    run.now_is(cleared, raw)
            except (StoreError, OSError) as exc:
                self._store_failed("reading an answer", exc)
        finally:  # its key is free for another question once its answer left the record
            run.asked.pop(key, None)
            run.given.pop(key, None)
        return _decode_answer(kind, answer)

    # -- checkpoints ---------------------------------------------------------------------

    def _run_of(self, ctx: CallContext) -> Run | None:
        """The run here of the detached call a tool's context belongs to."""
        if ctx.detached_id is None:
            return None
        run = self.runs.get(record_key(ctx.principal, ctx.detached_id))
        return run if run is not None and run.call is not None and run.call.ctx is ctx else None

    async def checkpoint(self, ctx: CallContext, key: str, value: Any) -> bool:
        """`CallContext.checkpoint`: `value` journaled under `key` in the call's record (a later
        run gets it in its metadata, and recovery resumes the call). False: no run of it here.

        Raises:
            StoreError: the journal could not be written.
            TypeError: `key` is not a string, or `value` is not JSON.
        """
        driver = self.entry.asyncio_driver
        if driver is not None and sniffio.current_async_library() == "asyncio":
            kept: bool = await driver.run(lambda: self.checkpoint(ctx, key, value))
            return kept
        if not isinstance(key, str):
            raise TypeError(f"a checkpoint's key is a string, not {type(key).__name__}")
        value = msgspec.json.decode(msgspec.json.encode(value))  # JSON now, or TypeError now
        run = self._run_of(ctx)
        if run is None:
            return False
        owner = self.owner
        now = self.now()

        def change(r: Record) -> Record | None:
            if r.phase == "done" or r.owner != owner:
                return None
            return msgspec.structs.replace(r, checkpoint=r.checkpoint | {key: value}, updated=now)

        new, changed, raw = await self.journal.change(run.key, change, self.options.ttl, run.known)
        if not changed:
            return False
        run.now_is(new, raw)
        return True

    # -- deferring -----------------------------------------------------------------------

    def _pending(
        self, record: Record, reason: Literal["approval", "outside"], message: str | None
    ) -> ToolPending:
        if message is None:
            if reason == "approval":
                message = (
                    f"Tool {record.tool!r} needs an approval before it runs; it waits for one as call "
                    f"{record.id}, and its result comes in a later turn. Do not call it again."
                )
            else:
                message = (
                    f"Tool {record.tool!r} runs outside this server as call {record.id}; its result "
                    "comes in a later turn. Do not call it again."
                )
        return ToolPending(
            call_id=record.call_id,
            tool=record.tool,
            detached_id=record.id,
            reason=reason,
            message=message,
            expires_at=record.expires,
        )

    def _expiry(self, expires: float | None) -> float | None:
        seconds = expires if expires is not None else self.options.expires
        return None if seconds is None else self.now() + seconds

    async def defer_call(
        self,
        c: Call[ToolPlan],
        ctx: CallContext | None,
        reason: Literal["approval", "outside"],
        message: str | None,
        expires: float | None,
    ) -> ToolResult:
        """A policy defers `c` (`CallRequest.defer`): its record waits (a detached call's own, or
        a new one), and the call's result is its ToolPending; or the failure that kept it from
        being journaled. Never suspends on a MemoryStore."""
        run = detached_run.get()
        if run is not None and run.call is c:
            return await self._defer_run(run, reason, message, expires)
        metadata = ctx.metadata if ctx is not None else c.metadata
        return await self._defer_new(
            c.call, c.principal, metadata, reason, message, expires, started=False, timeout=c.limit
        )

    async def defer_from_tool(
        self,
        ctx: CallContext,
        reason: Literal["approval", "outside"],
        message: str | None,
        expires: float | None,
    ) -> ToolResult:
        """A tool defers its own call (`ctx.defer`), as `defer_call` does."""
        driver = self.entry.asyncio_driver
        if driver is not None and sniffio.current_async_library() == "asyncio":
            result: ToolResult = await driver.run(lambda: self.defer_from_tool(ctx, reason, message, expires))
            return result
        run = detached_run.get()
        if run is not None and run.call is not None and run.call.ctx is ctx:
            return await self._defer_run(run, reason, message, expires)
        c = self._call_of(ctx)
        call = c.call if c is not None else ToolCall(id=ctx.call_id, name=ctx.tool_name, arguments="{}")
        return await self._defer_new(
            call,
            ctx.principal,
            ctx.metadata,
            reason,
            message,
            expires,
            started=reason == "outside",
            timeout=c.limit if c is not None else None,
        )

    def _call_of(self, ctx: CallContext) -> Call[ToolPlan] | None:
        """The call a running tool's context belongs to (its arguments are journaled)."""
        actor = self.routing.actor(ctx.tool_name)
        if actor is not None:
            for c in actor.plan.running:
                if c.ctx is ctx:
                    return c
        return None

    async def _defer_new(
        self,
        call: ToolCall,
        principal: str | None,
        metadata: Mapping[str, Any] | None,
        reason: Literal["approval", "outside"],
        message: str | None,
        expires: float | None,
        *,
        started: bool,
        timeout: float | None,
    ) -> ToolResult:
        tool = call.name
        if self.unsupported is not None:
            return _not_deferred(call, self.unsupported)
        if self.closing or self.entry.closing:
            return _not_deferred(call, "the runtime is shutting down")
        if principal is not None and "\x00" in principal:
            return _not_deferred(call, "its principal holds a NUL character")
        record = self._record(
            call,
            principal,
            metadata,
            new_id(),
            phase="waiting",
            waiting=reason,
            started=started,
            expires=self._expiry(expires),
            timeout=timeout,  # counted from its approval
        )
        why = unwritable(record)
        if why is not None:  # refused before it takes a place in the principal's bound
            return _not_deferred(call, why)
        try:
            await self._count_in(principal)
        except ToolOverloaded as exc:
            return ToolFailure(
                call_id=call.id,
                tool=tool,
                kind=FailureKind.OVERLOADED,
                message=f"tool {tool!r}: {exc.reason}",
            )
        except (StoreError, OSError) as exc:
            return _not_deferred(call, f"the journal did not answer ({exc})")
        pending = self._pending(record, reason, message)
        record.message = pending.message
        try:
            await self._mark(principal, record.id)
            await self.journal.create(record)
        except BaseException as exc:  # its place in the bound is given back, whatever ended it
            with (
                trio.CancelScope(shield=True),
                trio.move_on_after(1.0),
                contextlib.suppress(StoreError, OSError),
            ):
                await self.store.incr(count_key(principal), -1)
            if isinstance(exc, StoreError | OSError):
                return _not_deferred(call, f"the journal did not answer ({exc})")
            raise
        self._ensure_keeping()
        self._bump()
        return pending

    async def _defer_run(
        self, run: Run, reason: Literal["approval", "outside"], message: str | None, expires: float | None
    ) -> ToolResult:
        owner = self.owner
        until = self._expiry(expires)
        now = self.now()
        record = run.record
        text = self._pending(msgspec.structs.replace(record, expires=until), reason, message).message

        def change(r: Record) -> Record | None:
            if r.phase not in ("queued", "running") or r.owner != owner:
                return None
            return msgspec.structs.replace(
                r, phase="waiting", waiting=reason, owner=None, approved=False, decision=None,
                expires=until, message=text, updated=now,
            )  # fmt: skip

        try:
            new, changed, raw = await self.journal.change(run.key, change, self.options.ttl, run.known)
        except (StoreError, OSError) as exc:
            return _not_deferred(
                ToolCall(id=record.call_id, name=record.tool), f"the journal did not answer ({exc})"
            )
        if not changed or new is None:
            return _not_deferred(ToolCall(id=record.call_id, name=record.tool), "its journal entry changed")
        run.now_is(new, raw)
        self._bump()
        return self._pending(new, reason, message)

    # -- the verbs ------------------------------------------------------------------------

    async def get_status(self, detached_id: str, principal: str | None) -> DetachedStatus:
        _, record = await self._read(detached_id, principal)
        return self.status(record)

    async def changed_since(self, detached_id: str, principal: str | None, version: int) -> DetachedStatus:
        """The status once its version is past `version` (or it ended)."""
        while True:
            _, record = await self._read(detached_id, principal)
            if record.version > version or record.phase == "done":
                return self.status(record)
            await self._wait_change()

    async def result(self, detached_id: str, principal: str | None) -> ToolResult:
        """Its one result, once it has one (it may wait for an approval, an answer...)."""
        while True:
            _, record = await self._read(detached_id, principal)
            if record.phase == "done" and record.result is not None:
                return record.result
            run = self.runs.get(record.key)
            if run is not None:
                await run.done.wait()  # it ends here (answered, deferred, or taken over: read again)
            else:
                await self._wait_change()

    async def cancel(self, detached_id: str, principal: str | None) -> DetachedStatus:
        raw, record = await self._read(detached_id, principal)
        if record.phase == "done":
            return self.status(record)  # idempotent: it has its one result
        key = record.key
        now = self.now()

        def change(r: Record) -> Record | None:
            if r.phase == "done" or r.cancel:
                return None
            if r.phase == "waiting" and r.waiting != "answer":
                text = (
                    "the call was cancelled before it ran"
                    if r.waiting == "approval"
                    else "the call was cancelled while its result was awaited from outside"
                )
                return self._ended(r, failure_of(r, FailureKind.CANCELLED, text), "cancelled")
            return msgspec.structs.replace(r, cancel=True, updated=now)

        new, changed, _ = await self.journal.change(key, change, self.options.ttl, _known(raw, record))
        if new is None:
            raise CallNotFound(detached_id)
        if changed and new.phase == "done":
            await self._after_end(new)
            return self.status(new)
        run = self.runs.get(key)
        if run is not None:
            run.user_cancelled = True
            run.hand_over(False)
            run.scope.cancel()
            with trio.move_on_after(_CANCEL_WAIT):
                await run.done.wait()
        elif new.phase != "done" and await self._gone(new.owner, {}):
            await self._take_over(new, None)  # its process is gone: answered here, now
        self._bump()
        _, record = await self._read(detached_id, principal)
        return self.status(record)

    def _refusal(self, record: Record, verb: str) -> CallStateError:
        status = self.status(record)
        if record.phase == "done":
            how = {"denied": "was denied", "expired": "expired", "cancelled": "was cancelled"}.get(
                record.decision or "", "has ended"
            )
            why = f"it {how} ({status.state.value})"
        elif record.phase == "waiting" and record.waiting == "outside":
            why = "it waits for its result from outside (supply it, or expire it)"
        elif record.phase == "waiting" and record.waiting == "approval":
            why = "it waits for an approval (approve or deny it)"
        elif record.phase == "waiting":
            why = "its tool asked a question (answer it)"
        else:
            why = "it is running and waits for nothing"
        return CallStateError(f"detached call {record.id!r} cannot be {verb}: {why}; nothing changed", status)

    async def approve(
        self, detached_id: str, principal: str | None, arguments: str | Mapping[str, Any] | None
    ) -> DetachedStatus:
        while True:
            raw, record = await self._read(detached_id, principal)
            if record.phase == "waiting" and record.waiting == "approval":
                approved = await self._approve(record, raw, arguments)
                if approved is None:
                    continue  # decided meanwhile by someone else: look again
                return self.status(approved)
            if record.approved or record.decision == "approved":
                return self.status(record)  # idempotent
            raise self._refusal(record, "approved")

    async def _approve(
        self, record: Record, raw: bytes | None, arguments: str | Mapping[str, Any] | None
    ) -> Record | None:
        """waiting(approval) -> queued here, approved (with the edited arguments); run it. None:
        it changed meanwhile."""
        self._check_open()
        text = record.arguments if arguments is None else self._checked_arguments(record, arguments)
        await self._own()
        now = self.now()
        owner = self.owner

        def change(r: Record) -> Record | None:
            if r.phase != "waiting" or r.waiting != "approval":
                return None
            return msgspec.structs.replace(
                r, phase="queued", owner=owner, approved=True, decision="approved",
                arguments=text, waiting=None, expires=None, message=None, updated=now,
                deadline=None if r.timeout is None else now + r.timeout,
            )  # fmt: skip

        new, changed, new_raw = await self.journal.change(
            record.key, change, self.options.ttl, _known(raw, record)
        )
        if new is None:
            raise CallNotFound(record.id)
        if not changed:
            return None
        self._spawn(new, None, new_raw)
        self._bump()
        return new

    def _checked_arguments(self, record: Record, arguments: str | Mapping[str, Any]) -> str:
        """Edited arguments, decoded as the tool decodes a model's (the call stays pending if not).

        Raises:
            InvalidArguments: they do not decode (the message names the JSON path).
            CallStateError: the tool is not served by this runtime (they cannot be checked).
        """
        actor = self.routing.actor(record.tool)
        if actor is None:
            raise CallStateError(
                f"the arguments of detached call {record.id!r} cannot be edited here: tool "
                f"{record.tool!r} is not served by this runtime",
                self.status(record),
            )
        if not isinstance(arguments, str | Mapping):
            raise InvalidArguments(
                f"edited arguments are a JSON object (its text, or a mapping), not {type(arguments).__name__}"
            )
        raw = arguments if isinstance(arguments, str) else dict(arguments)
        probe: Call[ToolPlan] = Call(
            ToolCall(id=record.call_id, name=record.tool, arguments=raw), None, actor.plan, math.inf, None
        )
        if not actor.plan.decode(probe):
            message = probe.result.content if probe.result is not None else "the arguments do not decode"
            found = _PATH.search(message)
            raise InvalidArguments(message.removeprefix("Error: "), found.group(1) if found else "$")
        if isinstance(raw, str):
            return raw
        return msgspec.json.encode(raw).decode()

    async def deny(self, detached_id: str, principal: str | None, message: str) -> DetachedStatus:
        raw, record = await self._read(detached_id, principal)
        if record.phase == "waiting" and record.waiting == "approval":
            tool = record.tool
            reason = str(message).strip() or "no reason given"

            def change(r: Record) -> Record | None:
                if r.phase != "waiting" or r.waiting != "approval":
                    return None
                text = f"running tool {tool!r} was denied: {reason}; it did not run"
                return self._ended(r, failure_of(r, FailureKind.REJECTED, text), "denied")

            return await self._decide(detached_id, record, raw, change, "denied", "denied")
        return self._decided(record, "denied", "denied")

    async def expire(self, detached_id: str, principal: str | None) -> DetachedStatus:
        raw, record = await self._read(detached_id, principal)
        if record.phase == "waiting" and record.waiting != "answer":
            record = await self._expired(record, raw, force=True)
        if record.decision == "expired":
            return self.status(record)  # idempotent
        raise self._refusal(record, "expired")

    async def supply(
        self, detached_id: str, principal: str | None, value: Any, error: str | None
    ) -> DetachedStatus:
        raw, record = await self._read(detached_id, principal)
        if record.phase == "waiting" and record.waiting == "outside":
            result = self._outside_result(record, value, error)

            def change(r: Record) -> Record | None:
                if r.phase != "waiting" or r.waiting != "outside":
                    return None
                return self._ended(r, result, "supplied")

            return await self._decide(detached_id, record, raw, change, "supplied", "given an outside result")
        return self._decided(record, "supplied", "given an outside result")

    async def _decide(
        self,
        detached_id: str,
        record: Record,
        raw: bytes | None,
        change: Callable[[Record], Record | None],
        decision: str,
        refused: str,
    ) -> DetachedStatus:
        """End a waiting call by `change` (the application's decision); its status, or what
        `_decided` says of the record another process changed first."""
        new, changed, _ = await self.journal.change(record.key, change, self.options.ttl, _known(raw, record))
        if new is None:
            raise CallNotFound(detached_id)
        if changed:
            await self._after_end(new)
            return self.status(new)
        return self._decided(new, decision, refused)

    def _decided(self, record: Record, decision: str, refused: str) -> DetachedStatus:
        """The status of a call `decision` already ended (the same verb again is idempotent), or
        CallStateError: it ended otherwise, or does not wait for this."""
        if record.decision == decision:
            return self.status(record)
        raise self._refusal(record, refused)

    def _outside_result(self, record: Record, value: Any, error: str | None) -> ToolResult:
        """The result an outside value makes, shaped and checked as the tool's own would be.

        Raises:
            ResultTypeError: `value` is not the tool's declared result type.
            TypeError: neither a value nor an error, or both.
        """
        if (value is _NOTHING) == (error is None):
            raise TypeError("supply either the outside result's value or an error, not both")
        if error is not None:
            return failure_of(record, FailureKind.ERROR, f"tool {record.tool!r} failed where it ran: {error}")
        actor = self.routing.actor(record.tool)
        if actor is None:
            try:
                text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
            except (TypeError, ValueError):
                text = str(value)
            return ToolSuccess(call_id=record.call_id, tool=record.tool, content=text, value=value)
        try:  # checked first: a tool's own value of another type reaches the model (loose result
            # annotations), but the application that supplies one is told now, and can send it again
            actor.plan.tool.result_codec.check(value)
        except ResultTypeError as exc:
            raise ResultTypeError(f"the outside result of detached call {record.id!r}: {exc}") from None
        probe: Call[ToolPlan] = Call(
            ToolCall(id=record.call_id, name=record.tool, arguments=record.arguments),
            None,
            actor.plan,
            math.inf,
            None,
        )
        shaped = actor.plan.shape(probe, value, wait=False)
        assert shaped is not None  # never None when it may not wait
        if type(shaped) is ToolFailure and (shaped.error_type or "").endswith("ResultTypeError"):
            raise ResultTypeError(f"the outside result of detached call {record.id!r}: {shaped.message}")
        return shaped

    async def answer(
        self, detached_id: str, principal: str | None, response: Any, key: str | None = None
    ) -> DetachedStatus:
        raw, record = await self._read(detached_id, principal)
        if record.phase == "waiting" and record.waiting == "approval":
            if key not in (None, APPROVAL_KEY):
                raise self._no_question(record, key)
            if not isinstance(response, Answer):
                raise TypeError(
                    f"detached call {detached_id!r} asks for an approval: answer it with runtime.Answer"
                )
            if response.action == "accept":
                return await self.approve(detached_id, principal, None)
            reason = response.reason or ("declined" if response.action == "decline" else "dismissed")
            return await self.deny(detached_id, principal, reason)
        if record.phase != "waiting" or record.waiting != "answer":
            raise self._refusal(record, "answered")
        if key is None:
            if len(record.questions) != 1:
                raise CallStateError(
                    f"detached call {detached_id!r} asks {len(record.questions)} questions at once "
                    f"({', '.join(map(repr, record.questions))}): answer one with key=...; nothing changed",
                    self.status(record),
                )
            key = next(iter(record.questions))
        elif key not in record.questions:
            raise self._no_question(record, key)
        kind = record.questions[key].kind
        wanted = {"elicitation": Answer, "sampling": Sampled}.get(kind)
        if wanted is not None and not isinstance(response, wanted):
            raise TypeError(
                f"detached call {detached_id!r} asks a question ({kind}): answer it with {wanted.__name__}"
            )
        if kind == "roots" and not (
            isinstance(response, Sequence) and all(isinstance(r, Root) for r in response)
        ):
            raise TypeError(
                f"detached call {detached_id!r} asks for roots: answer it with a list of runtime.Root"
            )
        given = msgspec.to_builtins(list(response) if kind == "roots" else response)
        try:
            msgspec.json.encode(given)
        except (TypeError, ValueError, RecursionError) as exc:  # text that is not Unicode, say
            raise ValueError(
                f"the answer to question {key!r} of detached call {detached_id!r} cannot be journaled "
                f"({type(exc).__name__}: {str(exc)[:200]}); nothing changed"
            ) from None
        now = self.now()
        answered = key

        def change(r: Record) -> Record | None:
            if r.phase != "waiting" or r.waiting != "answer" or answered not in r.questions:
                return None
            rest = {k: q for k, q in r.questions.items() if k != answered}
            answers = {**r.answers, answered: given}
            if rest:  # the others stay open: it still waits
                return msgspec.structs.replace(r, questions=rest, answers=answers, updated=now)
            return msgspec.structs.replace(
                r, phase="running" if r.started else "queued", waiting=None, questions={},
                answers=answers, updated=now,
            )  # fmt: skip

        new, changed, _ = await self.journal.change(record.key, change, self.options.ttl, _known(raw, record))
        if new is None:
            raise CallNotFound(detached_id)
        if not changed:
            if new.phase == "waiting" and new.waiting == "answer":
                raise self._no_question(new, key)
            raise self._refusal(new, "answered")
        run = self.runs.get(new.key)
        if run is not None:
            run.raw = None  # read again before its next change
            run.deliver(key, given)
        self._bump()
        return self.status(new)

    def _no_question(self, record: Record, key: str | None) -> CallStateError:
        open_ = ", ".join(map(repr, self.status(record).questions)) or "nothing"
        return CallStateError(
            f"detached call {record.id!r} asks no question {key!r} now (it asks {open_}); nothing changed",
            self.status(record),
        )

    async def listed(self, principal: str | None, *, waiting: bool) -> list[DetachedStatus]:
        """The principal's calls: the waiting ones (`waiting`), or every one still kept."""
        _, principal = check_lookup("x", principal)
        prefix = ("dca:" if waiting else "dc:") + principal_prefix(principal)
        found: list[DetachedStatus] = []
        for key in await self.store.keys(prefix):
            detached_id = key[len(prefix) :]
            if "\x00" in detached_id or not ID.fullmatch(detached_id):
                continue
            try:
                _, record = await self._read(detached_id, principal)
            except CallNotFound:
                continue
            if waiting and record.phase != "waiting":
                continue
            found.append(self.status(record))
        found.sort(key=lambda s: (s.created_at, s.id))
        return found


def _known(raw: bytes | None, record: Record) -> tuple[bytes, Record] | None:
    return (raw, record) if raw is not None else None


def _free_key(base: str, record: Record, asked: Mapping[str, Any]) -> str:
    """`base`, or `base-2`, `base-3`...: the first key no open question of the call holds (the
    same question asked twice at once is two questions)."""
    key, n = base, 1
    while key in record.questions or key in asked:
        n += 1
        key = f"{base}-{n}"
    return key


def _decode_answer(kind: str, answer: Any) -> Any:
    if kind == "elicitation":
        return msgspec.convert(answer, Answer)
    if kind == "sampling":
        return msgspec.convert(answer, Sampled)
    return msgspec.convert(answer, list[Root])


def _not_deferred(call: ToolCall, why: str) -> ToolFailure:
    return ToolFailure(
        call_id=call.id,
        tool=call.name,
        kind=FailureKind.UNAVAILABLE,
        message=f"tool {call.name!r} could not be deferred: {why}",
    )


_NOT_KEPT = frozenset((_LINK, "traceparent", "tracestate"))
"""Metadata a run does not inherit: its trace is its own, linked to its starter's (`_link`)."""


def _portable(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The metadata a journaled call keeps: what is JSON (not the runtime's own keys, which a
    run sets again, nor its starter's trace context, which its span links to instead)."""
    if not metadata:
        return {}
    kept: dict[str, Any] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or key.startswith("runtime.") or key in _NOT_KEPT:
            continue
        if value is None or isinstance(value, str | int | float | bool):
            kept[key] = value
    return kept


def _link(metadata: Mapping[str, Any] | None) -> str | None:
    """What a journaled call's span links to: the caller's W3C traceparent (its metadata's, as
    an MCP request passes it), else the current span's."""
    given = metadata.get("traceparent") if metadata else None
    return given if isinstance(given, str) else _traceparent()


def _traceparent() -> str | None:
    """The current span as a W3C traceparent (a detached call's span links to it), if any."""
    try:
        from ..tracing import current_traceparent
    except ImportError:  # pragma: no cover - OpenTelemetry is a dependency
        return None
    return current_traceparent()


class DetachedCall:
    """A handle on a detached (or deferred) call: from `rt.detach(call)`, or `rt.detached(id)`.

    It holds no state of its own (the journal does): any number of handles, in any process, on
    the same id and principal see and change the same call. Each verb returns the call's
    `DetachedStatus` after it. An id that is not the principal's (unknown, another principal's,
    forgotten after its ttl) raises `CallNotFound` from every method.

    Attributes:
        id: the detached call's id.
        principal: who it runs for (the handle sees only that principal's call).
    """

    __slots__ = ("_book", "_run", "id", "principal")

    def __init__(self, book: Book, run: Runner, detached_id: str, principal: str | None) -> None:
        self._book = book
        self._run = run
        self.id = detached_id
        self.principal = principal

    def __repr__(self) -> str:
        return f"<DetachedCall {self.id!r} principal={self.principal!r}>"

    async def status(self) -> DetachedStatus:
        """The call as it is now."""
        status: DetachedStatus = await self._run(lambda: self._book.get_status(self.id, self.principal))
        return status

    async def result(self) -> ToolResult:
        """Its one result: waits until it ends (through approvals and questions; bound the wait
        with a timeout of your own, e.g. `trio.move_on_after`)."""
        result: ToolResult = await self._run(lambda: self._book.result(self.id, self.principal))
        return result

    async def watch(self) -> AsyncIterator[DetachedStatus]:
        """Its status now, then each new one as it changes, until it ends (the last one)."""
        version = -1
        while True:
            status: DetachedStatus = await self._run(
                lambda since=version: self._book.changed_since(self.id, self.principal, since)  # type: ignore[misc]
            )
            version = status.version
            yield status
            if status.done:
                return

    async def cancel(self) -> DetachedStatus:
        """Cancel it: a pending call is answered CANCELLED (it never runs); a running one is
        cancelled where it runs, from any process (its status says `cancel_requested` until its
        run hears it). Idempotent: a call that ended already keeps its result."""
        status: DetachedStatus = await self._run(lambda: self._book.cancel(self.id, self.principal))
        return status

    async def approve(self, *, arguments: str | Mapping[str, Any] | None = None) -> DetachedStatus:
        """Approve a call that waits for an approval: it runs now, in this process, exactly once
        whoever else approves it too (a second approval is the status as it is). `arguments`:
        edited ones, decoded as the model's would be (InvalidArguments, naming the JSON path,
        if they do not decode: the call stays pending).

        Raises:
            CallStateError: it was denied, expired, cancelled or ended, or waits for nothing.
        """
        status: DetachedStatus = await self._run(
            lambda: self._book.approve(self.id, self.principal, arguments)
        )
        return status

    async def deny(self, message: str) -> DetachedStatus:
        """Deny a call that waits for an approval: it ends REJECTED with `message` (what the
        model reads) and never runs. A second denial is the status as it is.

        Raises:
            CallStateError: it was approved, expired, cancelled or ended, or waits for no approval.
        """
        status: DetachedStatus = await self._run(lambda: self._book.deny(self.id, self.principal, message))
        return status

    async def expire(self) -> DetachedStatus:
        """Withdraw a call that waits (an approval, an outside result) now, as its time running
        out would: it ends TIMEOUT and never runs.

        Raises:
            CallStateError: it does not wait for an approval or an outside result.
        """
        status: DetachedStatus = await self._run(lambda: self._book.expire(self.id, self.principal))
        return status

    async def supply(self, value: Any = _NOTHING, *, error: str | None = None) -> DetachedStatus:
        """Give a call that waits for its result from outside that result: `value`, checked and
        shaped as the tool's own return value would be (ResultTypeError if it is not the tool's
        declared type: the call stays pending), or `error` (what the model reads: ERROR).

        Raises:
            CallStateError: it does not wait for an outside result.
        """
        status: DetachedStatus = await self._run(
            lambda: self._book.supply(self.id, self.principal, value, error)
        )
        return status

    async def answer(
        self, response: Answer | Sampled | Sequence[Root], *, key: str | None = None
    ) -> DetachedStatus:
        """Answer a question its tool asked (`status().questions`, by key): an `Answer` to an
        elicitation (to an approval: accept approves, decline or cancel denies), `Sampled` to a
        sampling request, a list of `Root` to a roots request. `key`: which question, when it
        asks several at once (without it, the one it asks); the others stay open, and the call
        waits in input_required until each is answered.

        Raises:
            CallStateError: it asks nothing now, no question `key`, or several and no `key` said.
            TypeError: the response is not of the question's kind.
            ValueError: the response cannot be journaled (text that is not valid Unicode).
        """
        status: DetachedStatus = await self._run(
            lambda: self._book.answer(self.id, self.principal, response, key)
        )
        return status
