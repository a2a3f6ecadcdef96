"""Tools for the placement tests, at module level so that a worker imports them by reference."""

from __future__ import annotations

import ctypes
import os
import sys
import time
from pathlib import Path
from typing import Literal

import msgspec
import trio
import trio.lowlevel
from opentelemetry import trace

from runtime import CallContext, Tool, fail, tool
from runtime.placement import Subprocess


@tool(placement=Subprocess(workers=2))
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool(placement=Subprocess(workers=1))
def crashy(how: Literal["segfault", "exit", "ok"] = "ok") -> int:
    """Crash the worker the hard way (a segfault in C, or os._exit(3)), or answer its pid."""
    if how == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    elif how == "exit":
        os._exit(3)
    return os.getpid()


@tool(placement=Subprocess(workers=1), timeout=1)
def stuck(pid_file: str, seconds: float = 60) -> str:
    """Block in C code (time.sleep) far past its timeout, after saying which process it is."""
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(seconds)
    return "woke up"


@tool(placement=Subprocess(workers=1))
def sleeper(pid_file: str, seconds: float = 60) -> str:
    """Block in C code with no timeout of its own, after saying which process it is."""
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(seconds)
    return "woke up"


@tool(placement=Subprocess(workers=4))
def whoami(i: int, pause: float = 0.05) -> dict[str, int]:
    """Which worker served call i."""
    time.sleep(pause)
    return {"i": i, "pid": os.getpid()}


@tool(placement=Subprocess(workers=1))
def chatty(text: str) -> str:
    """Print to stdout (a lot), then answer."""
    print("chatty says", text)
    print("x" * 200_000)
    return text.upper()


@tool(placement=Subprocess(workers=1, max_memory_mb=1024))
def hog(megabytes: int) -> int:
    """Allocate `megabytes` at once (beyond the hard cap: MemoryError), else answer the pid."""
    block = bytearray(megabytes << 20)
    del block
    return os.getpid()


_leak: list[bytes] = []


@tool(placement=Subprocess(workers=1, max_rss_mb=120))
def leak(megabytes: int) -> int:
    """Keep `megabytes` after the call (a leak); answers its pid."""
    _leak.append(b"\x01" * (megabytes << 20))
    return os.getpid()


@tool(placement=Subprocess(workers=1), timeout=30)
async def context_echo(text: str, ctx: CallContext) -> dict[str, object]:
    """An async tool in a worker: trio runs there too; it sees a plain copy of its context."""
    await trio.sleep(0.001)
    return {
        "text": text,
        "call_id": ctx.call_id,
        "tool": ctx.tool_name,
        "user": ctx.metadata.get("user"),
        "has_deadline": ctx.deadline is not None,
    }


@tool(placement=Subprocess(workers=1))
async def reporter(steps: int, ctx: CallContext) -> dict[str, object]:
    """Report progress and log from a worker; both travel back to the caller's handlers."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}")
    await ctx.log("warning", "almost done", pid=os.getpid())
    return {"steps": steps, "heard": ctx.hears_progress, "pid": os.getpid()}


@tool(placement=Subprocess(workers=1))
def judge(n: int) -> int:
    """Refuse odd numbers, fail on zero."""
    if n == 0:
        raise ZeroDivisionError("n must not be zero")
    if n % 2:
        fail(f"{n} is odd")
    return n


class Flaky(Exception):
    """The tool's own signal that it needs a restart."""


@tool(placement=Subprocess(workers=1), restart_on=(Flaky,))
def flaky(fail_now: bool) -> int:
    """Raise a restart_on exception, or answer the pid."""
    if fail_now:
        raise Flaky("connection poisoned")
    return os.getpid()


@tool(placement=Subprocess(workers=1))
def span_parent() -> str:
    """The trace context the tool's code runs in (what a span it starts would be a child of)."""
    ctx = trace.get_current_span().get_span_context()
    return f"{ctx.trace_id:032x}-{ctx.span_id:016x}"


@tool(placement=Subprocess(workers=1))
def scribble(megabytes: int) -> int:
    """Write `megabytes` MiB to stderr without a newline (a progress bar gone wrong)."""
    block = b"#" * (1 << 20)
    for _ in range(megabytes):
        sys.stderr.buffer.write(block)
    sys.stderr.flush()
    return megabytes


@tool(placement=Subprocess(workers=1))
def big_text(megabytes: int) -> str:
    """A text result of `megabytes` MiB (a log, a file, a page: what a model cannot read whole)."""
    return "0123456789abcdef" * (megabytes << 16)


@tool(placement=Subprocess(workers=1))
def big_rows(megabytes: int) -> list[dict[str, object]]:
    """A structured result of about `megabytes` MiB: rows of a table."""
    return [{"id": i, "name": f"row {i}", "tags": ["a", "b"]} for i in range(megabytes * 24_000)]


class Echo(msgspec.Struct):
    text: str


class Counter(Tool[Echo, dict]):
    """A class tool whose setup runs in each worker."""

    name = "counter"
    placement = Subprocess(workers=2)

    async def setup(self) -> None:
        self.pid = os.getpid()
        self.count = 0

    async def execute(self, args: Echo) -> dict:
        await trio.sleep(0.02)
        self.count += 1
        return {"text": args.text, "pid": self.pid, "count": self.count}


class BrokenSetup(Tool[Echo, str]):
    """A class tool whose setup fails in its worker."""

    name = "broken_setup"
    placement = Subprocess(workers=1)

    async def setup(self) -> None:
        raise RuntimeError("no database")

    async def execute(self, args: Echo) -> str:
        return args.text


# -- Ray ------------------------------------------------------------------------------------

try:
    from runtime.placement.ray import Ray
except ImportError:  # pragma: no cover - the ray extra is absent
    Ray = None  # type: ignore[assignment,misc]

if Ray is not None:

    @tool(placement=Ray(replicas=2, num_cpus=0))
    def ray_add(a: int, b: int) -> dict[str, int]:
        """Add on a Ray replica; says which process served."""
        return {"sum": a + b, "pid": os.getpid()}

    @tool(placement=Ray(replicas=1, num_cpus=0))
    def ray_sleep(seconds: float, pid_file: str = "") -> int:
        """Block in a Ray replica (after saying which process it is)."""
        if pid_file:
            Path(pid_file).write_text(str(os.getpid()))
        time.sleep(seconds)
        return os.getpid()

    @tool(placement=Ray(replicas=1, num_cpus=0), timeout=1)
    def ray_stuck(pid_file: str, seconds: float = 60) -> int:
        """Block far past its timeout in a Ray replica."""
        Path(pid_file).write_text(str(os.getpid()))
        time.sleep(seconds)
        return os.getpid()

    @tool(placement=Ray(replicas=1, num_cpus=0))
    async def ray_span_parent(n: int) -> str:
        """The trace context the tool's code runs in on the Ray side (an async tool: trio there)."""
        await trio.lowlevel.checkpoint()
        if n < 0:
            fail("n must not be negative")
        ctx = trace.get_current_span().get_span_context()
        return f"{ctx.trace_id:032x}-{ctx.span_id:016x}"

    @tool(placement=Ray(replicas=1, num_cpus=0))
    def ray_crashy(exit: bool = False) -> int:
        """End the replica's process (os._exit), or answer its pid."""
        if exit:
            os._exit(3)
        return os.getpid()

    @tool(placement=Ray(replicas=1, num_cpus=0))
    def ray_big_text(megabytes: int) -> str:
        """A text result of `megabytes` MiB from a Ray replica."""
        return "0123456789abcdef" * (megabytes << 16)

    @tool(placement=Ray(replicas=1, num_cpus=0), max_concurrency=4)
    async def ray_nap(seconds: float, notes: str = "") -> int:
        """Sleep on trio in a Ray replica, four at once; in `notes` (a folder) say it started and
        whether it was cancelled."""
        if notes:
            (Path(notes) / "started").write_text(str(os.getpid()))
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            if notes:
                (Path(notes) / "cancelled").write_text(str(os.getpid()))
            raise
        return os.getpid()


@tool(placement=Subprocess(workers=2), restart_on=(Flaky,))
def restless(pid_file: str = "", fail_now: bool = False) -> int:
    """Sleep a minute after saying which process it is, or raise a restart_on exception."""
    if fail_now:
        raise Flaky("connection poisoned")
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(60)
    return os.getpid()


@tool(placement=Subprocess(workers=1))
def huge(bits: int) -> int:
    """2 ** bits: past 64 bits MessagePack cannot carry it as a number."""
    return 1 << bits


def _times(a: int) -> dict[str, float]:
    """`cpu`: the worker's CPU time so far; `runnable`: the seconds its main thread (where it
    reads and polls) has been runnable so far, on a core or waiting in a run queue for one
    (Linux's /proc/self/schedstat: the two add up whatever else the cores are doing; -1 where
    there is no such file)."""
    try:
        with open("/proc/self/schedstat") as stats:
            on_cpu, waiting, _ = stats.read().split()
        runnable = (int(on_cpu) + int(waiting)) / 1e9
    except (OSError, ValueError):
        runnable = -1.0
    return {"a": a, "cpu": time.process_time(), "runnable": runnable}


@tool(placement=Subprocess(workers=1, spin_us=0))
def drowsy(a: int) -> dict[str, float]:
    """A worker that sleeps in its read as soon as it has answered (no poll for the next call)."""
    return _times(a)


@tool(placement=Subprocess(workers=1, spin_us=10_000))
def eager(a: int) -> dict[str, float]:
    """A worker that polls for the next call the longest a Subprocess allows (10 ms)."""
    return _times(a)


@tool(placement=Subprocess(workers=1, spin_us=10_000))
async def eager_async(a: int) -> dict[str, float]:
    """`eager`, async: the worker polls between its trio loop's passes."""
    await trio.lowlevel.checkpoint()
    return _times(a)
