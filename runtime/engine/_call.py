"""The call state machine: one object per tool call, from its entry to its one result.

    entry (`_entry`)   prepare: routed, its context, its deadline      QUEUED
       │               begin: bounds + decode, policies, starting hooks
       │               admitted by its tool's mailbox (`_mailbox`)
       ▼
    executor.start     `start()`: the tool's own deadline armed         RUNNING
       │               the tool runs where its executor runs it
       ▼
    executor reports   `returned` / `raised` / `stopped` / `lost`       DONE
       │               the one outcome mapping (the tool's plan, `_plan`): its result,
       │               the restart decision (a result kept as artifacts that has to wait
       │               stays RUNNING, its keeping the call's executor, until `kept`)
       ▼
    the caller         `reported()`: counted, finishing hooks           REPORTED

Every transition is a method of `Call`, and only these change `state`. A call is settled (DONE)
exactly once: the first `settle` wins, whoever makes it (its executor, its caller's deadline,
its caller's cancellation, a crash, shutdown), and a result that comes after that is late:
dropped, and counted as abandoned work when its code ran on past a grace.

The caller enforces every deadline itself: it waits until `expires`, and a call whose code
ignores its cancellation is answered TIMEOUT a grace after its deadline (`lapse`). A failed
attempt of a tool with a `Retry` goes RUNNING -> QUEUED again (`_again`), within the caller's
deadline.

What a call needs of its tool is the `Plan` protocol (the engine's `ToolPlan`, engine/_plan.py);
of where it runs, the `Executor` protocol; of who waits for it besides one trio task, `Reply`.
The engine's grace periods are declared here, once.
"""

from __future__ import annotations

import contextvars
import enum
import logging
import math
import random
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar

import trio

from ..messages import FailureKind, ToolCall, ToolFailure, ToolResult, ToolSuccess
from ..tools import CallContext, Retry
from ._outcome import failure
from ._stats import ToolCounters

__all__ = [
    "ABANDON_GRACE",
    "CANCELLED_MESSAGE",
    "DONE",
    "HOOK_GRACE",
    "HOST_GRACE",
    "KILL_GRACE",
    "KILL_TURN",
    "QUEUED",
    "REPORTED",
    "RUNNING",
    "Breaker",
    "Call",
    "CallState",
    "Executor",
    "Gate",
    "InCallerExecutor",
    "Plan",
    "Reply",
]

log = logging.getLogger("runtime.engine")

# -- the engine's grace periods, in seconds ----------------------------------------------

ABANDON_GRACE = 0.05
"""A running call gets this long to end after its cancellation before its caller answers it."""
HOOK_GRACE = 1.0
"""The finishing hooks of a cancelled caller's calls may take this long, shielded."""
KILL_GRACE = 0.5
"""At shutdown, cancelled calls get this long to end before they are abandoned."""
KILL_TURN = 0.01
"""At least this long for an actor that does stop when cancelled (it needs a turn to do it)."""
HOST_GRACE = 1.0
"""The runtime's last tasks may take this long to end once everything has stopped."""

CANCELLED_MESSAGE = "the call was cancelled by its caller"


class CallState(enum.Enum):
    """Where a call is: QUEUED (not running yet), RUNNING, DONE (answered), REPORTED (counted)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    REPORTED = "reported"


QUEUED = CallState.QUEUED
RUNNING = CallState.RUNNING
DONE = CallState.DONE
REPORTED = CallState.REPORTED


class Executor(Protocol):
    """Where a tool's calls run. It starts a call, cancels it on request, and reports its end
    through the call (`returned`, `raised`, `stopped`, `lost`); it knows nothing of failure
    kinds, features, spans, policies or supervision. Each frees its mailbox slot itself, when
    what the call held (a worker task, a thread, a process) is free again."""

    def start(self, call: Call[Any]) -> None:
        """Run `call` (already admitted); `call.start()` says whether it still should."""

    def cancel(self, call: Call[Any]) -> None:
        """Stop a running `call` (its deadline, its caller); it reports `stopped` when it has."""

    stuck: int
    """Slots held by work that was answered but could not be stopped (blocked threads)."""

    holds: bool
    """A started call holds a slot until the executor frees it (False: it ends within `start`)."""


class InCallerExecutor(Executor, Protocol):
    """An executor that runs a started call in its caller's own trio task (`run`, awaited by the
    caller right after admission)."""

    async def run(self, call: Call[Any]) -> bool:
        """Run the started `call` here, to its report; True if its code yielded to trio."""
        ...

    def serve(self) -> None:
        """An incarnation of the tool serves."""

    def kill(self) -> None:
        """The incarnation ended: what runs is cancelled."""


class Reply(Protocol):
    """Who waits for a call other than one trio task: a batch, an asyncio future."""

    def settled(self, call: Call[Any]) -> None: ...

    def expire_at(self, when: float) -> None: ...


class Gate(Protocol):
    """A place a call takes before its mailbox and gives back once its work is over (a budget,
    the run of identical calls: engine/_resilience)."""

    def enter(self, call: Call[Any], host: bool) -> bool: ...

    def answered(self, call: Call[Any]) -> None: ...

    def keeps(self, call: Call[Any]) -> bool: ...

    def given_up(self, call: Call[Any], result: ToolResult) -> None: ...

    def leave(self, call: Call[Any], result: ToolResult) -> None: ...


class Breaker(Protocol):
    """A circuit breaker, as a call's attempts meet it (engine/_resilience/_breaker.py)."""

    state: str

    def refusal(self, now: float, call: Call[Any]) -> str | None: ...

    def allows_retry(self) -> bool: ...

    def heard(self, call: Call[Any], result: ToolResult, ran: bool) -> None: ...


class Mailbox(Protocol):
    """What a call tells its tool's mailbox (engine/_mailbox.py)."""

    def left(self, call: Call[Any]) -> None: ...


class Plan(Protocol):
    """What a call needs of its tool (the engine's `ToolPlan`, engine/_plan.py): read-only."""

    @property
    def name(self) -> str: ...
    @property
    def counters(self) -> ToolCounters: ...
    @property
    def mailbox(self) -> Mailbox: ...
    @property
    def running(self) -> set[Call[Any]]: ...

    holding: int  # calls routed to it and not reported yet (the call counts itself out)

    @property
    def draining(self) -> bool: ...
    @property
    def breaker(self) -> Breaker | None: ...
    @property
    def retry(self) -> Retry | None: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def default_timeout(self) -> float | None: ...
    @property
    def untimed(self) -> bool: ...

    def drained(self) -> None: ...

    def retry_later(self, delay: float, call: Call[Any]) -> None: ...

    def shape(self, call: Call[Any], value: Any, wait: bool = True) -> ToolResult | None: ...

    def failure(self, call: Call[Any], exc: BaseException) -> ToolResult: ...

    def unavailable_message(self) -> str: ...


_copy_context = contextvars.copy_context
_INF = math.inf
_Task = trio.lowlevel.Task
_reschedule = trio.lowlevel.reschedule
_STOPPED = (FailureKind.TIMEOUT, FailureKind.CANCELLED)


P = TypeVar("P", bound=Plan)
"""The plan of a call's tool: `ToolPlan` for the engine's calls."""


def _lapsed(result: ToolResult | None) -> bool:
    """Whether `result` says the call's deadline passed (TIMEOUT)."""
    return type(result) is ToolFailure and result.kind is FailureKind.TIMEOUT


class Call(Generic[P]):
    """One tool call on its way (see the module docstring for its states).

    Attributes:
        call: the ToolCall (made safe to echo when the model sent odd fields).
        ctx: its CallContext, when something needs one (features, the tool, asking).
        context: a copy of the caller's contextvars; the tool's code runs in it.
        plan: what serves its tool (a call that reaches no tool has one too: `Nowhere`).
        args: the decoded arguments.
        deadline: absolute trio time by which it must end (inf: none); once RUNNING, the
            sooner of the caller's and the tool's own.
        expires: when its waiter looks again (`lapse`).
        limit: the timeout in seconds behind `deadline`, for the TIMEOUT message.
        result: its one result, once DONE.
        executor: what runs it, once RUNNING.
        job: the executor's handle on it while it runs (a cancel scope, a thread job, a task).
        cancelled: its caller gave up, so a stop means CANCELLED, not TIMEOUT.
        interrupted: it was asked to stop (its deadline, its caller); a grace later it is given up.
        reply: who is told when it is settled (a parked trio task, a batch, an asyncio waiter).
        waiter: the cancel scope a single trio caller waits in (its deadline is moved in).
        index: its position in its batch.
        queued: it waits in its tool's mailbox.
        principal: who it runs for (None: nobody said).
        flows: the policies that let it through, each waiting for its outcome (None: none).
        notes: the policies' decisions, kept until the call's span exists (not None: its
            features have not heard it start yet).
        shown: the call as observers see it, when a policy redacted some of it.
        asked: the tool the model named, when a policy sent the call to another one.
        metadata: the caller's metadata, kept for a context made later (a policy asks for one).
        attempt: which attempt runs (1 until a `Retry` runs it again).
        until: the caller's deadline and its timeout, while the tool's own shortens `deadline`
            (an attempt after a tool TIMEOUT gets the tool's timeout again, within this).
        gates: the budgets it waits in before its mailbox (`Gate`s), and how many it holds.
        passed: how many of its gates it holds.
        handed: its caller gave up while identical calls wait for its work (a dedupe `Flight`):
            the work runs on for them, not as an orphan of its caller (`stop_handed` ends it).
        settled_at: when it was answered while its work still ran.
        error: what its tool raised in its last attempt, for `Retry(on=ExceptionType)`.
    """

    __slots__ = (
        "args",
        "asked",
        "attempt",
        "call",
        "cancelled",
        "context",
        "ctx",
        "deadline",
        "error",
        "executor",
        "expires",
        "flows",
        "gates",
        "handed",
        "index",
        "interrupted",
        "job",
        "limit",
        "metadata",
        "notes",
        "passed",
        "plan",
        "principal",
        "queued",
        "reply",
        "result",
        "settled_at",
        "shown",
        "state",
        "until",
        "waiter",
    )

    def __init__(
        self,
        call: ToolCall,
        ctx: CallContext | None,
        plan: P,
        deadline: float,
        limit: float | None,
        reply: Any = None,
        index: int = 0,
        principal: str | None = None,
    ) -> None:
        self.call = call
        self.ctx = ctx
        self.plan = plan
        self.context = _copy_context()
        self.args: Any = None
        self.deadline = deadline
        self.expires = deadline
        self.limit = limit
        self.state = QUEUED
        self.result: ToolResult | None = None
        self.executor: Executor | None = None
        self.job: Any = None
        self.cancelled = False
        self.interrupted = False
        self.settled_at = _INF
        self.reply = reply
        self.waiter: trio.CancelScope | None = None
        self.index = index
        self.queued = False
        self.principal = principal
        self.flows: list[Any] | None = None
        self.notes: list[tuple[str, dict[str, Any]]] | None = None
        self.shown: ToolCall | None = None
        self.asked: str | None = None
        self.metadata: Mapping[str, Any] | None = None
        self.attempt = 1
        self.until: tuple[float, float | None] | None = None
        self.gates: tuple[Gate, ...] | None = None
        self.passed = 0
        self.handed = False
        self.error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<Call {self.call.id!r} {self.call.name!r} {self.state.value}>"

    # -- settling ----------------------------------------------------------------------

    @property
    def settled(self) -> bool:
        """Answered (DONE or REPORTED)."""
        state = self.state
        return state is DONE or state is REPORTED

    def settle(self, result: ToolResult) -> bool:
        """Answer the call from outside its executor (its deadline, its caller, a policy, a
        refusal, shutdown); False (nothing happens) if it was answered already. A running call
        answered this way is an orphan: its work goes on, and ends here later (`_end`)."""
        state = self.state
        if state is DONE or state is REPORTED:
            return False
        self._end(result, False)
        return True

    def fail(self, kind: FailureKind, message: str, error_type: str | None = None) -> bool:
        """Settle with a failure."""
        return self.settle(failure(self.call, kind, message, error_type))

    def reported(self) -> bool:
        """DONE -> REPORTED; False if it was reported already (the finishing step runs once)."""
        if self.state is not DONE:
            return False
        self.state = REPORTED
        plan = self.plan
        plan.holding -= 1
        counters = plan.counters
        counters.calls += 1
        result = self.result
        if type(result) is ToolSuccess:
            counters.succeeded += 1
        elif type(result) is ToolFailure:
            counters.record_failure(result)
        return True

    def _held(self) -> tuple[Gate, ...]:
        """The gates it holds a place in."""
        gates = self.gates
        return gates[: self.passed] if gates is not None else ()

    def _leave_gates(self, result: ToolResult) -> None:
        """Give back the places it held (budgets, an identical call's run) once its work is over;
        `result` is what the work ended with (its answer, or a late result after it)."""
        held = self._held()
        self.passed = 0
        for gate in held:
            gate.leave(self, result)

    # -- the waiter's side: its caller enforces the deadline and gives up ---------------

    def expire_at(self, when: float) -> None:
        """The waiter must look again by `when` at the latest."""
        if when < self.expires:
            self.expires = when
            waiter = self.waiter
            if waiter is not None:
                if when < waiter.deadline:
                    waiter.deadline = when
            else:
                reply = self.reply
                if reply is not None and type(reply) is not _Task:
                    reply.expire_at(when)

    async def wait(self) -> None:
        """Park the calling trio task until the call is settled (a checkpoint either way)."""
        if self.state is DONE:
            await trio.lowlevel.checkpoint()
            return
        self.reply = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort)

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        self.reply = None
        return trio.lowlevel.Abort.SUCCEEDED

    def lapse(self) -> None:
        """`expires` passed and the call is not answered: a queued call times out; a running one
        is cancelled, and answered a grace later if it ignores that (abandoned)."""
        state = self.state
        if state is QUEUED:
            self.fail(FailureKind.TIMEOUT, self.timeout_message())
        elif state is RUNNING:
            if not self.interrupted:
                self.interrupted = True
                self.expires = trio.current_time() + ABANDON_GRACE  # the waiter reads it again
                executor = self.executor
                assert executor is not None
                executor.cancel(self)
            else:
                self.give_up(
                    FailureKind.TIMEOUT,
                    f"{self.timeout_message()}; it did not stop when cancelled and was abandoned",
                )

    def abandon(self, kind: FailureKind, message: str) -> None:
        """The caller stops waiting (its cancellation, shutdown): a queued call is answered now,
        a running one cancelled (its later result is dropped). Identical calls waiting for its
        work keep it running (`handed`) until they leave too (`stop_handed`)."""
        state = self.state
        if state is QUEUED:
            self.fail(kind, message)
        elif state is RUNNING:
            self.cancelled = cancelled = kind is FailureKind.CANCELLED
            if cancelled and any(gate.keeps(self) for gate in self._held()):
                self.handed = True  # identical calls wait for this work: it runs on for them,
                self.fail(kind, message)  # and its caller, who left, is answered now
                return
            self.interrupted = True
            executor = self.executor
            assert executor is not None
            executor.cancel(self)

    def stop_handed(self) -> None:
        """The calls its work ran on for have all ended too: cancel it now (as `abandon` would
        have), its late result dropped."""
        if self.handed and not self.interrupted:
            self.handed = False
            self.interrupted = True
            # an orphan now: counted as abandoned if it runs on past a grace
            self.plan.counters.orphans[self] = trio.current_time() + ABANDON_GRACE
            executor = self.executor
            assert executor is not None
            executor.cancel(self)

    def give_up(self, kind: FailureKind, message: str) -> None:
        """Answer a running call whose code did not stop when cancelled: abandoned (counted)."""
        if self.ctx is not None:
            self.ctx.abandoned = True
        plan = self.plan
        if self.handed:  # answered already; the calls its work went on for hear this now
            self.handed = False
            plan.counters.orphans[self] = self.settled_at
            result = failure(self.call, kind, message)
            for gate in self._held():
                gate.given_up(self, result)
            return
        if self.fail(kind, message) and self in plan.counters.orphans:
            plan.counters.orphans[self] = self.settled_at  # known to ignore cancellation already

    def timeout_message(self) -> str:
        limit = f"{self.limit:g}s" if self.limit is not None else "its deadline"
        return f"tool {self.call.name!r} did not finish within {limit}"

    # -- attempts under its tool's `Retry` -----------------------------------------------

    def retried(self, result: ToolFailure) -> bool:
        """Its `Retry` tries this failure again (its kind, or what raised it), and attempts remain."""
        retry = self.plan.retry
        return retry is not None and self.attempt < retry.attempts and retry.retries(result.kind, self.error)

    def _again(self, result: ToolFailure) -> bool:
        """RUNNING -> QUEUED for another attempt (`Retry`), if its kind is retried, attempts
        remain and the backoff ends within the caller's deadline. The span hears of each."""
        plan = self.plan
        retry = plan.retry
        if retry is None or self.cancelled or not self.retried(result):
            return False
        if plan.breaker is not None and not plan.breaker.allows_retry():
            return False  # its circuit opened: the model reads this failure, not a storm of attempts
        delay = retry.delay(self.attempt + 1, random.random())
        until = self.until
        deadline, limit = until if until is not None else (self.deadline, self.limit)
        now = trio.current_time()
        if now + delay >= deadline or (self.interrupted and until is None):
            return False  # no time left (or the caller's own deadline stopped it)
        ctx = self.ctx
        if ctx is not None:
            ctx.add_event(
                "tool.retry", {"tool.retry.attempt": self.attempt, "tool.retry.outcome": result.kind.value}
            )
        plan.counters.retries += 1
        self.attempt += 1
        self.error = None
        self.state = QUEUED
        self.interrupted = False
        self.deadline = self.expires = deadline
        self.limit = limit
        waiter = self.waiter
        if waiter is not None:
            waiter.deadline = deadline  # its waiter looks again at the caller's deadline, no sooner
        plan.retry_later(delay, self)
        return True

    # -- the executor's side: its start and its report -----------------------------------

    def start(self, executor: Executor) -> bool:
        """QUEUED -> RUNNING, on `executor`: arm the deadline. False: do not run it (it was
        answered while it waited, or its deadline passed before it could start: TIMEOUT)."""
        if self.state is not QUEUED:
            return False
        plan = self.plan
        breaker = plan.breaker
        if breaker is not None and breaker.state == "open":  # it opened while this call waited
            refused = breaker.refusal(trio.current_time(), self)
            if refused is not None:
                self.fail(FailureKind.UNAVAILABLE, refused)
                return False
        deadline = self.deadline
        if deadline != _INF or not plan.untimed:  # a deadline to arm
            own = plan.timeout
            if own is None and deadline == _INF:
                own = plan.default_timeout
            now = trio.current_time()
            if deadline <= now:
                self.fail(FailureKind.TIMEOUT, self.timeout_message())
                return False
            if own is not None and now + own < deadline:
                if plan.retry is not None:
                    self.until = (deadline, self.limit)
                deadline = self.deadline = now + own
                self.limit = own
            self.expire_at(deadline)  # the waiter looks again then, should the tool ignore its cancel
            if self.ctx is not None:
                self.ctx.deadline = deadline
        self.state = RUNNING
        self.executor = executor
        plan.counters.in_flight += 1
        plan.running.add(self)
        return True

    def returned(self, value: Any) -> None:
        """The tool returned `value`."""
        plan = self.plan
        result = plan.shape(self, value)
        if result is not None:  # None: its result is being kept whole (`kept` ends it)
            self._end(result)

    def kept(self, result: ToolResult) -> None:
        """Its result was kept as artifacts (a keeping that had to wait: `_artifacts.Keeper`)."""
        self._end(result)

    def raised(self, exc: BaseException) -> None:
        """The tool raised `exc` (not a cancellation of this call)."""
        plan = self.plan
        self.error = exc  # for its Retry's `on` (an exception type, a predicate)
        self._end(plan.failure(self, exc))

    def stopped(self) -> None:
        """The call stopped because it was asked to (its deadline, its caller)."""
        self._end(self.stop_result())

    def lost(self) -> None:
        """The executor went away under the call (its tool crashed, shutdown, a dead worker)."""
        plan = self.plan
        self._end(failure(self.call, FailureKind.UNAVAILABLE, plan.unavailable_message()))

    def stop_result(self) -> ToolFailure:
        if self.cancelled and not self.handed:  # a handed-over run that stops met its deadline
            return failure(self.call, FailureKind.CANCELLED, CANCELLED_MESSAGE)
        return failure(self.call, FailureKind.TIMEOUT, self.timeout_message())

    # -- the one end --------------------------------------------------------------------

    def _end(self, result: ToolResult, over: bool = True) -> None:
        """The one end: every way a call, or its work, ends passes here.

        `over`: its executor reported, so the work of its running attempt is over; otherwise it is
        answered from outside (`settle`), and a running call's work goes on, to end here again
        later with a late result. In this order, each once:

        1. the executor's side is over: not in flight, not running;
        2. its breaker hears the attempt once (every attempt that ran, a late one too): a
           running call answered TIMEOUT is heard then (a server that hangs opens it, whether
           or not its code ever stops), its late end is not; a call answered before it ran, or
           while it runs for another reason (its caller left), gives back a half-open probe's
           turn, deciding nothing (its late end decides);
        3. a failed attempt that its `Retry` takes goes back to QUEUED (not answered yet);
        4. the answer (the first end): DONE with `result`; a running call answered from
           outside becomes an orphan, counted as abandoned if its work runs on past a grace;
        5. its gates: work that is over (or never began) leaves them with what it ended with,
           a late result included (the dedupe journal hears it); work that goes on tells
           them it was answered;
        6. a late result: dropped, and counted when its code ran on past its answer's grace;
        7. its waiter is told (once, at the answer);
        8. a tool that drains for its stop hears that nothing runs any more.

        The policies' after-halves, the counters and the features hear the answer once, when
        its caller reports it (`reported`, engine/_entry.py `Entry.finish`).
        """
        plan = self.plan
        state = self.state
        answered = state is DONE or state is REPORTED
        if over:  # 1
            if not answered:
                plan.counters.in_flight -= 1
            plan.running.discard(self)
            self.job = None
        if plan.breaker is not None:  # 2
            breaker = plan.breaker
            if not answered:
                if over or state is QUEUED:
                    breaker.heard(self, result, over)
                elif state is RUNNING:  # answered while it runs: its deadline is its outcome
                    breaker.heard(self, result, _lapsed(result))
            elif over and not _lapsed(self.result):  # a late end (a lapsed one was heard)
                breaker.heard(self, result, True)
        if (  # 3
            plan.retry is not None
            and over
            and not answered
            and type(result) is ToolFailure
            and self._again(result)
        ):
            if plan.draining and not plan.running:
                plan.drained()
            return
        if not answered:  # 4
            if over:
                pass  # its work reported: it was running (a call in its mailbox has no work)
            elif state is RUNNING:
                plan.counters.in_flight -= 1
                self.settled_at = now = trio.current_time()
                if not self.handed:
                    plan.counters.orphans[self] = now + ABANDON_GRACE
            elif self.queued:
                self.queued = False
                plan.mailbox.left(self)
            self.state = DONE
            self.result = result
        elif over:
            self.handed = False  # its work is over: nothing left to stop
        if self.passed:  # 5
            if over or state is QUEUED:
                self._leave_gates(result)
            else:
                for gate in self._held():
                    gate.answered(self)
        if answered:  # 6 (a late result: `over`, since a settled call is never settled again)
            self._late(plan, result)
        else:  # 7
            reply = self.reply
            if reply is not None:
                if type(reply) is _Task:
                    self.reply = None
                    _reschedule(reply)
                else:
                    reply.settled(self)
        if over and plan.draining and not plan.running:  # 8
            plan.drained()

    def _late(self, plan: Plan, result: ToolResult) -> None:
        """A result for a call answered already (its caller gave up, a deadline lapsed): counted
        as abandoned work if it came more than a grace after the answer."""
        since = plan.counters.orphans.pop(self, None)
        if since is None:
            return
        if type(result) is ToolFailure and result.kind in _STOPPED:
            return  # it ended through its cancellation (however late the loop let it): not abandoned
        now = trio.current_time()
        if now >= since:
            plan.counters.abandoned_late += 1
            log.warning(
                "tool %r: call %s ended %.3gs after it was answered (it ignored cancellation); "
                "its result (%s) is dropped",
                plan.name,
                self.call.id,
                now - self.settled_at,
                "success" if isinstance(result, ToolSuccess) else getattr(result, "kind", "pending"),
            )
