"""`Subprocess`: a tool's calls run in a small pool of worker processes of its own.

Each tool actor with this placement owns `workers` processes started with
`trio.lowlevel.open_process` (`python -m runtime.placement._worker`); each serves one call at
a time over its pipes, in length-prefixed MessagePack frames (`_protocol`).

    a worker dies (segfault, os._exit, OOM kill)  -> its call only: ERROR "... killed by SIGSEGV";
                                                     replaced after the restart backoff, and counted
                                                     toward the restart intensity (too many: DOWN,
                                                     tried again after its cool-down)
    a new worker cannot start for want of fds/memory -> tried again with a capped backoff, not counted
    a call's deadline passes                      -> the worker is killed (and reaped) before the
                                                     TIMEOUT answer; a new one starts
    its caller cancels                            -> the same, as the cancellation reaches the actor
    a call leaves the worker above `max_rss_mb`   -> the worker is retired after answering, replaced
    the tool exhausts `max_memory_mb` (RLIMIT_AS)  -> MemoryError: ERROR for that call, worker replaced

A call whose worker died is never retried: the tool may have done half its work.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import signal
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import trio
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..exceptions import (
    CallStopped,
    InvalidArguments,
    RemoteToolError,
    ToolDefinitionError,
    ToolOverloaded,
    ToolRejected,
    ToolUnavailable,
)
from ..messages import ToolCall, ToolSuccess
from ..tools import CallContext, Placement, PlacementStatistics, ToolBase
from ..tools.lowlevel import PlacedTool, PlacementHost
from ._frames import FdFrames
from ._lines import LineSplitter
from ._pieces import assemble
from ._pool import ReplicaPool, open_pool
from ._protocol import (
    Done,
    Load,
    LogRecord,
    Piece,
    Progress,
    Raised,
    Ready,
    Request,
    Stop,
    decode_reply,
    encode_request,
    frame,
)
from ._reference import main_path, reference

__all__ = ["Subprocess", "rebuild", "trace_carrier"]

log = logging.getLogger("runtime.placement")

_W3C = TraceContextTextMapPropagator()
_REAP = 5.0  # seconds a killed worker may take to be reaped (it is SIGKILLed: it cannot refuse)


def trace_carrier(ctx: CallContext | None) -> tuple[str | None, str | None]:
    """(traceparent, tracestate) of the current span, else of the call's metadata."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    if "traceparent" not in carrier and ctx is not None and "traceparent" in ctx.metadata:
        return str(ctx.metadata["traceparent"]), ctx.metadata.get("tracestate")
    return carrier.get("traceparent"), carrier.get("tracestate")


def rebuild(raised: Raised) -> BaseException:
    """The exception a `Raised` reply stands for, as the engine's failure mapping expects it."""
    if raised.category == "rejected":
        return ToolRejected(raised.message)
    if raised.category == "invalid":
        return InvalidArguments(raised.message, raised.path)
    if raised.category == "unavailable":
        return ToolUnavailable(raised.message)
    if raised.category == "overloaded":
        return ToolOverloaded(raised.message)
    if raised.category == "memory":
        return RemoteToolError("MemoryError", raised.message or "the worker ran out of memory (its cap)")
    return RemoteToolError(raised.error_type, raised.message, restart=raised.restart)


def death_cause(returncode: int | None) -> str:
    """'was killed by SIGSEGV', 'exited with code 3'."""
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


MAX_SPIN_US = 10_000
"""`Subprocess(spin_us=)` at most: a wake-up costs tens of microseconds, polling longer buys nothing."""


class Subprocess(Placement):
    """Run the tool in worker processes of its own: crash isolation and real kills.

    Args:
        workers: processes (each serves one call at a time; more calls wait in the mailbox).
        max_rss_mb: a worker left above this resident size after a call is replaced.
        max_memory_mb: hard cap on each worker's address space (RLIMIT_AS, set once the tool is
            loaded): an allocation past it raises MemoryError in the tool, its call fails
            with ERROR and the worker is replaced.
        env: the workers' environment (default: this process's).
        python: the interpreter (default: this one, `sys.executable`).
        stop_timeout: seconds a worker gets to run `teardown()` and exit at shutdown.
        spin_us: microseconds a worker keeps polling for the next call after it answers one,
            before it goes to sleep (0: it sleeps at once). Waking a sleeping process costs
            tens of microseconds a call, more on a virtual machine (a warm call here went from
            +60-75 us over an in-process call to +10-20 us). It polls only while calls come
            within the window (after one that came later, it sleeps at once until one comes
            soon after its reply again), and yields its core to any other runnable process
            between polls (`sched_yield`), so sparse calls cost no CPU and a busy machine's
            caller is not crowded out.
    """

    in_caller = True  # a call writes to its worker and waits; cancelled, it kills the worker
    stops_calls = True  # `stop(task)` kills the worker serving the task's call

    def __init__(
        self,
        workers: int = 1,
        *,
        max_rss_mb: int | None = None,
        max_memory_mb: int | None = None,
        env: Mapping[str, str] | None = None,
        python: str | None = None,
        stop_timeout: float = 5.0,
        spin_us: int = 50,
    ) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ToolDefinitionError(f"Subprocess: workers must be a positive int, not {workers!r}")
        for name, value in (("max_rss_mb", max_rss_mb), ("max_memory_mb", max_memory_mb)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ToolDefinitionError(f"Subprocess: {name} must be a positive int or None, not {value!r}")
        if isinstance(spin_us, bool) or not isinstance(spin_us, int) or not 0 <= spin_us <= MAX_SPIN_US:
            raise ToolDefinitionError(
                f"Subprocess: spin_us must be an int from 0 to {MAX_SPIN_US:,} (microseconds), not {spin_us!r}"
            )
        self.workers = workers
        self.max_rss_mb = max_rss_mb
        self.max_memory_mb = max_memory_mb
        self.env = dict(env) if env is not None else None
        self.python = python or sys.executable
        self.stop_timeout = stop_timeout
        self.spin_us = spin_us

    def __repr__(self) -> str:
        return f"Subprocess(workers={self.workers}, max_rss_mb={self.max_rss_mb}, max_memory_mb={self.max_memory_mb})"

    def check(self, tool: ToolBase[Any, Any]) -> None:
        reference(tool, "in a worker process (placement=Subprocess)")

    def capacity(self, tool: ToolBase[Any, Any]) -> int:
        return self.workers

    def open(
        self, tool: ToolBase[Any, Any], host: PlacementHost
    ) -> contextlib.AbstractAsyncContextManager[PlacedTool]:
        return open_pool(_Pool, self, tool, host)


class WorkerStartFailed(Exception):
    """A worker did not get ready (it died, or its tool's setup() raised)."""


class _Worker:
    __slots__ = ("busy", "dead", "frames", "pid", "proc", "ready", "stopping", "task")

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.pid = proc.pid
        assert isinstance(proc.stdout, trio.lowlevel.FdStream)
        assert isinstance(proc.stdin, trio.lowlevel.FdStream)
        self.frames = FdFrames(proc.stdout.fileno(), proc.stdin.fileno())
        self.ready = False  # its tool is loaded and set up: it serves (until then it is `starting`)
        self.busy = False
        self.dead = False
        self.stopping = False  # killed or retired on purpose: its exit is not a loss
        self.task: trio.lowlevel.Task | None = None  # the task whose call it serves


class _Pool(ReplicaPool[_Worker]):
    """The workers of one tool actor's incarnation."""

    what = "worker"
    start_errors = (WorkerStartFailed, OSError)

    def __init__(self, placement: Subprocess, tool: ToolBase[Any, Any], host: PlacementHost) -> None:
        super().__init__(tool.name, host, placement.workers)
        self.placement = placement
        self.load = Load(
            ref=reference(tool, "in a worker process (placement=Subprocess)"),
            name=tool.name,
            sys_path=[p for p in sys.path if isinstance(p, str)],
            main=main_path(),
            max_memory_mb=placement.max_memory_mb,
            max_rss_mb=placement.max_rss_mb,
            spin_us=placement.spin_us,
        )
        self._load_frame = frame(self.load)
        self._idle: collections.deque[_Worker] = collections.deque()
        self._idle_lot = trio.lowlevel.ParkingLot()  # calls waiting for an idle worker
        self._parked: dict[trio.lowlevel.Task, bool] = {}  # tasks whose calls wait in it: stopped?
        self.workers: set[_Worker] = set()

    def statistics(self) -> PlacementStatistics:
        return PlacementStatistics(
            workers=sum(1 for w in self.workers if w.ready and not w.stopping and not w.dead),
            target=self.target,
            starting=self.starting,
            queued=self._idle_lot.statistics().tasks_waiting,
            lost=self.lost,
        )

    # -- workers -----------------------------------------------------------------------

    async def _start_one(self) -> None:
        """Start one worker, wait until its tool is loaded and set up, and let it take calls.

        Raises:
            WorkerStartFailed: it died first, or its setup raised; OSError: it could not start.
        """
        proc = await trio.lowlevel.open_process(
            [self.placement.python, "-m", "runtime.placement._worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.placement.env,
        )
        worker = _Worker(proc)
        self.workers.add(worker)
        self.nursery.start_soon(self._forward_stderr, worker)
        try:
            await worker.frames.write(self._load_frame)
            body = await worker.frames.read()
            if body is None:
                code = await _reap(worker.proc, 1.0)
                raise WorkerStartFailed(
                    f"its worker process (pid {worker.pid}) {death_cause(code)} before it was ready"
                )
            reply = decode_reply(body)
            if isinstance(reply, Raised):
                exc = rebuild(reply)
                raise WorkerStartFailed(f"setup() in its worker raised {exc}") from exc
            if not isinstance(reply, Ready):
                raise WorkerStartFailed(f"its worker answered {type(reply).__name__} to Load")
        except BaseException:
            worker.stopping = True
            with trio.CancelScope(shield=True):
                await _kill(proc)
            self.workers.discard(worker)
            raise
        worker.ready = True
        self.nursery.start_soon(self._watch, worker)
        self._release(worker)

    def _release(self, worker: _Worker) -> None:
        self._idle.append(worker)
        if self._idle_lot:  # a call waits for a worker
            self._idle_lot.unpark()

    async def _acquire(self) -> _Worker:
        """An idle worker: the one that answered last (a stack, not a queue: its caches and its
        core are warm; handing calls round the pool made a warm call a third slower).

        Raises:
            CallStopped: `stop` ended the call while it waited for one.
        """
        idle = self._idle
        while True:
            while idle:
                worker = idle.pop()
                if not worker.dead:
                    return worker
            task = trio.lowlevel.current_task()
            self._parked[task] = False
            try:
                await self._idle_lot.park()
            finally:
                stopped = self._parked.pop(task)
            if stopped:
                raise CallStopped("the call was stopped while it waited for a worker")

    def stop(self, task: trio.lowlevel.Task) -> None:
        """End the call `task` runs here now: the worker serving it is killed (its pipes close,
        so the call's read or write ends at once), or the call stops waiting for one; either way
        its `call` raises `CallStopped`. A worker stopped so is replaced, not counted as lost."""
        for worker in self.workers:
            if worker.task is task and worker.busy:
                worker.stopping = True
                if worker.proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError, OSError):
                        worker.proc.kill()
                return
        if task in self._parked:
            self._parked[task] = True
            self._idle_lot.unpark_all()  # the others look again and park once more

    def _gone(self, worker: _Worker) -> bool:
        worker.dead = True
        self.workers.discard(worker)
        return True

    def _label(self, worker: _Worker) -> str:
        return f"worker (pid {worker.pid})"

    async def _watch(self, worker: _Worker) -> None:
        """Notice an idle worker that dies (a busy one is noticed by its call)."""
        code = await worker.proc.wait()
        if not worker.busy and not worker.stopping and not worker.dead:
            self._lost(worker, death_cause(code))

    async def _forward_stderr(self, worker: _Worker) -> None:
        """The worker's stderr (and the tool's print()) to our log, tagged with the tool and pid.

        Linear in what the worker writes, newlines or not (`LineSplitter`: bounded lines).
        """
        stream = worker.proc.stderr
        assert stream is not None
        lines = LineSplitter()
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            async for chunk in stream:
                self._log_lines(worker, lines.feed(chunk))
        self._log_lines(worker, lines.close())
        with contextlib.suppress(Exception):
            await stream.aclose()

    def _log_lines(self, worker: _Worker, lines: list[tuple[bytes, bool]]) -> None:
        if not lines or not log.isEnabledFor(logging.INFO):
            return
        extra = {"tool": self.name, "worker_pid": worker.pid}
        for line, whole in lines:
            log.info(
                "tool %r worker %d: %s%s",
                self.name,
                worker.pid,
                line.decode(errors="replace"),
                "" if whole else " [line continues]",
                extra=extra,
            )

    async def _retire(self, worker: _Worker) -> None:
        """Stop a healthy worker (over its memory cap) and start another (not a loss)."""
        worker.stopping = True
        self._start()
        with trio.CancelScope(shield=True):
            await self._stop_one(worker)

    async def _stop_one(self, worker: _Worker) -> None:
        worker.stopping = True
        proc = worker.proc
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            assert proc.stdin is not None
            with trio.move_on_after(1.0):
                await proc.stdin.send_all(frame(Stop()))
            await proc.stdin.aclose()
        with trio.move_on_after(self.placement.stop_timeout):
            await proc.wait()
        await _kill(proc)
        self.workers.discard(worker)

    async def _replace(self, worker: _Worker) -> None:
        """Kill (and reap) a worker stopped on purpose in the middle of a call, and start
        another in its place: not a loss."""
        worker.stopping = True
        self.workers.discard(worker)
        with trio.CancelScope(shield=True):
            await _kill(worker.proc)
        self._start()

    def _members(self) -> list[_Worker]:
        return list(self.workers)

    # -- calls -------------------------------------------------------------------------

    async def call(
        self, call: ToolCall, arguments: bytes, ctx: CallContext | None, timeout: float | None
    ) -> ToolSuccess[Any]:
        traceparent, tracestate = trace_carrier(ctx)
        request = Request(
            call_id=call.id,
            arguments=arguments,
            metadata=dict(ctx.metadata) if ctx is not None else {},
            traceparent=traceparent,
            tracestate=tracestate,
            timeout=timeout,
            hears_progress=ctx is not None and ctx.hears_progress,
        )
        body = encode_request(request)
        data = len(body).to_bytes(4, "big") + body
        worker = await self._acquire()
        worker.busy = True
        worker.task = trio.lowlevel.current_task()
        try:
            try:
                await worker.frames.write(data)
                answer = await worker.frames.reply()
                while answer is not None:
                    reply = decode_reply(answer)
                    if isinstance(reply, Piece):  # a large result: the loop runs between its pieces
                        reply = await assemble(reply, worker.frames.read)
                    if not isinstance(reply, Progress | LogRecord):
                        break
                    await _relay(reply, ctx)  # the tool's progress and logs come before its reply
                    answer = await worker.frames.read()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ValueError):
                answer = None
        except BaseException:  # cancelled (deadline, caller, shutdown): stop the work for real
            await self._replace(worker)
            raise
        if worker.stopping:  # `stop` killed it (perhaps after it answered): replaced, not lost
            await self._replace(worker)
            if answer is None:
                raise CallStopped(f"its worker process (pid {worker.pid}) was stopped")
        elif answer is None:  # the worker died while serving this call
            with trio.CancelScope(shield=True):
                code = await _reap(worker.proc, 1.0)
            cause = death_cause(code)
            self._lost(worker, cause)
            raise _worker_lost(worker.pid, cause)
        else:
            worker.busy = False
            worker.task = None
            if getattr(reply, "retire", False):
                self.nursery.start_soon(self._retire, worker)
            else:
                self._release(worker)
        if isinstance(reply, Done):
            return reply.result
        if isinstance(reply, Raised):
            raise rebuild(reply)
        raise RemoteToolError("ProtocolError", f"the worker answered {type(reply).__name__} to a call")


async def _relay(notice: object, ctx: CallContext | None) -> None:
    """A tool's progress report or log record, given to the call's own context (handlers, span)."""
    if ctx is None:
        return
    if isinstance(notice, Progress):
        await ctx.report_progress(notice.progress, notice.total, notice.message)
    elif isinstance(notice, LogRecord):
        with contextlib.suppress(ValueError):
            await ctx.log(notice.level, notice.message, **notice.data)


def _worker_lost(pid: int, cause: str) -> BaseException:
    from ..exceptions import WorkerLost

    return WorkerLost(f"its worker process (pid {pid}) {cause} while serving this call")


async def _kill(proc: trio.Process) -> None:
    """SIGKILL `proc` (if it still runs) and reap it."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, OSError):
            proc.kill()
    with trio.move_on_after(_REAP):
        await proc.wait()
    for stream in (proc.stdin, proc.stdout):  # stderr: its forwarder reads it to the end
        if stream is not None:
            with contextlib.suppress(Exception):
                await stream.aclose()


async def _reap(proc: trio.Process, grace: float) -> int | None:
    """The exit code of a worker whose pipe closed (killed if it lingers past `grace`)."""
    with trio.move_on_after(grace):
        return await proc.wait()
    await _kill(proc)
    return proc.returncode
