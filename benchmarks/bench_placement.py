"""Placement costs: the same tool in-process, in Subprocess workers, on Ray replicas.

floor: the tool in-process (an async tool: the runtime's own cost, no thread), in the same
run and the same runtime; subjects: the same function placed in `Subprocess(workers=2)`,
`Ray(replicas=1)` and `Ray(replicas=2)` (a local Ray started here, on the main thread).

- warm call: sequential `rt.call`, one in flight, alternating rounds with the floor, medians;
  the note gives the overhead in us over in-process.
- pipe round trip: what crossing to another process costs at the least, without the runtime: a
  child Python process that reads a length-prefixed MessagePack frame from its stdin (blocking,
  after polling for it 50 us as a worker does: `Spin`), adds the two numbers and writes the
  answer back, the parent writing and waiting for it on trio (`FdFrames`, as Subprocess does),
  interleaved with Subprocess's warm call. Subprocess's warm call over in-process is this floor
  plus what the runtime adds.
- workers that sleep: the same warm call with `Subprocess(workers=2, spin_us=0)`, a worker that
  sleeps in its read as soon as it has answered: what the poll buys (a wake-up a call).
- fan-out: one `rt.call_many` of 1,000 calls (the placement's workers serve them in parallel).
- crash detection: a call whose worker segfaults, from `rt.call` to its ERROR (the worker's
  start, the segfault, the kernel's teardown, EOF and reaping: an upper bound of detection).
- worker start: opening a runtime whose one tool has one Subprocess worker.
- stuck calls: 40 calls of a sync tool blocked in time.sleep far past its 0.05 s timeout;
  the work still running right after they all came back TIMEOUT (in-process: the threads
  run on, nothing can interrupt them; Subprocess: the workers were killed).
- stderr without newlines: the runtime's CPU (its loop's thread) for a worker that writes
  40 MB and 10 MB to stderr with no newline, logged at INFO; the ratio is linear at 4x.
- large result: the longest CPU time the loop spent in one step (between two ticks of a 1 ms
  ticker) while a 200 MB text came back from a worker (in pieces).
- threads to await Ray: the most threads alive while 1,000 Ray calls are in flight, minus
  the threads before (the goal is zero: ObjectRefs are awaited through the trio token).
- on a cluster (`bench_ray_cluster`, saved as "cluster"): calls/s and p99 of a CPU-bound tool
  on 1, 2 and 4 replicas spread over nodes, and the time to serve again after a node is lost.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable

import trio

from runtime import RestartPolicy, ToolCall, open_runtime, tool
from runtime.placement import Subprocess

from ._harness import Report, Row


@tool
async def add_local(a: int, b: int) -> int:
    return a + b


@tool
def add_thread(a: int, b: int) -> int:
    return a + b


@tool(placement=Subprocess(workers=2))
def add_subprocess(a: int, b: int) -> int:
    return a + b


@tool(placement=Subprocess(workers=2, spin_us=0))
def add_asleep(a: int, b: int) -> int:
    return a + b


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
    """A text result of `megabytes` MiB."""
    return "0123456789abcdef" * (megabytes << 16)


@tool(placement=Subprocess(workers=1))
def crash(how: str = "segfault") -> int:
    if how == "segfault":
        ctypes.string_at(0)
    return os.getpid()


@tool(placement=Subprocess(workers=1))
def one_worker(a: int) -> int:
    return a


@tool(timeout=0.05)
def blocked_thread(seconds: float) -> float:
    time.sleep(seconds)  # blocked "in C": no thread can interrupt it
    return seconds


@tool(placement=Subprocess(workers=4), timeout=0.05)
def blocked_subprocess(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


try:
    from runtime.placement.ray import Ray, ensure_ray

    @tool(placement=Ray(replicas=1, num_cpus=0))
    def add_ray1(a: int, b: int) -> int:
        return a + b

    @tool(placement=Ray(replicas=2, num_cpus=0))
    def add_ray2(a: int, b: int) -> int:
        return a + b

    HAVE_RAY = True
except ImportError:  # the ray extra is absent
    HAVE_RAY = False


ARGS = '{"a": 1, "b": 2}'


async def _per_call(rt: object, name: str, n: int) -> float:
    call = ToolCall(id="b", name=name, arguments=ARGS)
    start = time.perf_counter()
    for _ in range(n):
        result = await rt.call(call)  # type: ignore[attr-defined]
        assert result.ok, result
    return (time.perf_counter() - start) / n * 1e6


async def _fan_out(rt: object, name: str, n: int) -> float:
    calls = [ToolCall(id=f"c{i}", name=name, arguments=ARGS) for i in range(n)]
    start = time.perf_counter()
    results = await rt.call_many(calls)  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - start
    assert all(r.ok for r in results)
    return elapsed * 1e6


async def _interleaved(
    subject: Callable[[], Awaitable[float]], floor: Callable[[], Awaitable[float]], rounds: int
) -> tuple[float, float]:
    s: list[float] = []
    f: list[float] = []
    for i in range(rounds):
        if i % 2:
            s.append(await subject())
            f.append(await floor())
        else:
            f.append(await floor())
            s.append(await subject())
    return statistics.median(s), statistics.median(f)


async def _measure(
    names: list[str], n: int, fan: int, rounds: int
) -> dict[str, tuple[float, float, float, float]]:
    tools = [add_local, add_thread, add_subprocess, add_asleep]
    if HAVE_RAY:
        tools += [add_ray1, add_ray2]
    out: dict[str, tuple[float, float, float, float]] = {}
    async with open_runtime(tools, tracing=False) as rt:
        for name in names:
            for _ in range(2):  # warm: the workers' first calls, the caches
                await _per_call(rt, name, 50)
                await _per_call(rt, "add_local", 50)
            warm, warm_floor = await _interleaved(
                lambda name=name: _per_call(rt, name, n), lambda: _per_call(rt, "add_local", n), rounds
            )
            spread, spread_floor = await _interleaved(
                lambda name=name: _fan_out(rt, name, fan),
                lambda: _fan_out(rt, "add_local", fan),
                max(3, rounds // 2),
            )
            out[name] = (warm, warm_floor, spread, spread_floor)
        if "add_subprocess" in names:
            pipe, placed = await _pipe_floor(rt, n, rounds)
            out["pipe"] = (pipe, placed, 0.0, 0.0)
    return out


_ECHO = """
import os, msgspec
from runtime.placement._worker import Spin
spin = Spin(0, 50)
decode, encode = msgspec.msgpack.Decoder().decode, msgspec.msgpack.Encoder().encode
buffer = b""
while True:
    while len(buffer) < 4 or len(buffer) < 4 + int.from_bytes(buffer[:4], "big"):
        spin.wait()
        chunk = os.read(0, 1 << 16)
        spin.came()
        if not chunk:
            raise SystemExit(0)
        buffer += chunk
    size = int.from_bytes(buffer[:4], "big")
    body, buffer = buffer[4 : 4 + size], buffer[4 + size :]
    request = decode(body)
    out = encode(request["a"] + request["b"])
    os.write(1, len(out).to_bytes(4, "big") + out)
"""


async def _pipe_floor(rt: object, n: int, rounds: int) -> tuple[float, float]:
    """(median us of a bare pipe round trip to a child process, of Subprocess's warm call)."""
    import subprocess

    import msgspec

    from runtime.placement._frames import FdFrames

    encode, decode = msgspec.msgpack.Encoder().encode, msgspec.msgpack.Decoder().decode
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", _ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert isinstance(proc.stdout, trio.lowlevel.FdStream)
    assert isinstance(proc.stdin, trio.lowlevel.FdStream)
    frames = FdFrames(proc.stdout.fileno(), proc.stdin.fileno())

    async def bare() -> float:
        start = time.perf_counter()
        for _ in range(n):
            body = encode({"a": 1, "b": 2})
            await frames.write(len(body).to_bytes(4, "big") + body)
            answer = await frames.read()
            assert answer is not None
            assert decode(answer) == 3
        return (time.perf_counter() - start) / n * 1e6

    try:
        await bare()
        return await _interleaved(bare, lambda: _per_call(rt, "add_subprocess", n), rounds)
    finally:
        await proc.stdin.aclose()
        with trio.move_on_after(5):
            await proc.wait()
        proc.kill()


async def _crash_detection(repeats: int) -> float:
    times = []
    async with open_runtime(
        [crash], tracing=False, restart=RestartPolicy(max_restarts=1000, backoff=0.0)
    ) as rt:
        for _ in range(repeats):
            ok = await rt.call(ToolCall(id="w", name="crash", arguments='{"how": "ok"}'))  # a live worker
            assert ok.ok, ok
            start = time.perf_counter()
            result = await rt.call(ToolCall(id="c", name="crash"))
            times.append((time.perf_counter() - start) * 1e6)
            assert not result.ok, result
            assert "SIGSEGV" in result.message, result  # type: ignore[union-attr]
    return statistics.median(times)


async def _worker_start(repeats: int) -> tuple[float, float]:
    times = []
    rss = []
    for _ in range(repeats):
        start = time.perf_counter()
        async with open_runtime([one_worker], tracing=False) as rt:
            times.append((time.perf_counter() - start) * 1e6)
            pid = (await rt.call(ToolCall(id="p", name="one_worker", arguments='{"a": 1}'))).value
            del pid
            rss.append(_children_rss_mb())
    return statistics.median(times), statistics.median(rss)


def _children_rss_mb() -> float:
    """The resident size of this process's Subprocess workers (Ray's processes are children too)."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                status = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if f"PPid:\t{os.getpid()}\n" in status and b"runtime.placement._worker" in cmdline:
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
    return total


async def _left_running(name: str, calls: int) -> tuple[int, int]:
    """(timeouts, work still running right after) for `calls` calls stuck far past their timeout."""
    async with open_runtime([blocked_thread, blocked_subprocess], tracing=False) as rt:
        batch = [ToolCall(id=f"s{i}", name=name, arguments='{"seconds": 1.0}') for i in range(calls)]
        results = await rt.call_many(batch)
        timeouts = sum(1 for r in results if not r.ok and r.kind.value == "timeout")  # type: ignore[union-attr]
        stats = rt.statistics().tools[name]
        return timeouts, stats.abandoned_running


async def _ray_threads(fan: int) -> int:
    async with open_runtime([add_ray2], tracing=False) as rt:
        await _fan_out(rt, "add_ray2", 50)  # Ray's own threads start on first use
        before = threading.active_count()
        peak = before
        done = trio.Event()

        async def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, threading.active_count())
                await trio.sleep(0.001)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample)
            await _fan_out(rt, "add_ray2", fan)
            done.set()
    return peak - before


class _Counting(logging.Handler):
    """Takes the worker's stderr lines as a log handler would (formats each), keeps nothing."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines = 0

    def emit(self, record: logging.LogRecord) -> None:
        record.getMessage()
        self.lines += 1


async def _stderr_cpu(sizes: tuple[int, ...], rounds: int) -> dict[int, float]:
    """CPU seconds of the runtime's thread (the trio loop) for a call whose worker writes `size`
    MiB to stderr without a newline, logged at INFO: the median of `rounds` per size."""
    logger = logging.getLogger("runtime.placement")
    level, propagate, counting = logger.level, logger.propagate, _Counting()
    logger.setLevel(logging.INFO)
    logger.addHandler(counting)
    logger.propagate = False  # the lines are formatted by our handler, not printed
    cpu: dict[int, list[float]] = {size: [] for size in sizes}
    try:
        async with open_runtime([scribble], tracing=False) as rt:
            await rt.call(ToolCall(id="w", name="scribble", arguments={"megabytes": 0}))
            for _ in range(rounds):
                for size in sizes:
                    start = time.thread_time()
                    await rt.call(ToolCall(id="s", name="scribble", arguments={"megabytes": size}))
                    await trio.sleep(0.2)  # the last lines are read after the answer
                    cpu[size].append(time.thread_time() - start)
    finally:
        logger.removeHandler(counting)
        logger.setLevel(level)
        logger.propagate = propagate
    return {size: statistics.median(times) for size, times in cpu.items()}


async def _big_result_stall(megabytes: int) -> tuple[float, float]:
    """The longest CPU time the loop's thread spent between two ticks of a 1 ms ticker while a
    `megabytes` MiB text came back from a worker, and the call's wall time (seconds)."""
    async with open_runtime([big_text], tracing=False) as rt:
        await rt.call(ToolCall(id="w", name="big_text", arguments={"megabytes": 0}))
        busiest = 0.0
        async with trio.open_nursery() as nursery:

            async def tick() -> None:
                nonlocal busiest
                last = time.thread_time()
                while True:
                    await trio.sleep(0.001)
                    now = time.thread_time()
                    busiest = max(busiest, now - last)
                    last = now

            gc.collect()
            nursery.start_soon(tick)
            began = time.perf_counter()
            result = await rt.call(ToolCall(id="b", name="big_text", arguments={"megabytes": megabytes}))
            took = time.perf_counter() - began
            await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    assert result.ok
    return busiest, took


def main(quick: bool = False) -> Report:
    n = 200 if quick else 2000
    fan = 1000
    rounds = 3 if quick else 7
    report = Report("placement")
    names = ["add_thread", "add_subprocess", "add_asleep"]
    if HAVE_RAY:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ensure_ray(num_cpus=2, include_dashboard=False)
        names += ["add_ray1", "add_ray2"]
    measured = trio.run(_measure, names, n, fan, rounds)
    label = {
        "add_thread": "InProcess sync",
        "add_subprocess": "Subprocess(2)",
        "add_asleep": "Subprocess(2, spin_us=0)",
        "add_ray1": "Ray(1)",
        "add_ray2": "Ray(2)",
    }
    for name in names:
        warm, warm_floor, spread, spread_floor = measured[name]
        target = None
        if name == "add_thread":
            note = f"{warm - warm_floor:+.1f} us: a sync tool in a worker thread (for comparison)"
        elif name == "add_subprocess":
            note = f"{warm - warm_floor:+.1f} us over in-process (goal < 60)"
        elif name == "add_asleep":
            note = f"{warm - warm_floor:+.1f} us over in-process: workers that sleep at once"
        else:
            note = f"{warm / 1000:.2f} ms a warm call (goal < 2 ms)"
        report.add(Row(f"warm call {label[name]}", label[name], "inproc", warm, warm_floor, target, note))
        report.add(
            Row(
                f"fan-out 1,000 {label[name]}",
                label[name],
                "inproc",
                spread,
                spread_floor,
                None,
                f"{spread / 1000:.1f} ms for 1,000 calls",
            )
        )
    if "pipe" in measured:
        pipe, placed, _, _ = measured["pipe"]
        inproc = measured["add_subprocess"][1]
        report.add(
            Row(
                "warm call Subprocess(2) vs a bare pipe round trip",
                "Subprocess(2)",
                "pipe",
                placed,
                pipe,
                None,
                f"the pipe alone is {pipe - inproc:+.1f} us over in-process; the runtime adds "
                f"{placed - pipe:+.1f} us to it",
            )
        )
    detect = trio.run(_crash_detection, 3 if quick else 9)
    report.add(
        Row(
            "crash: segfault -> ERROR",
            "Subprocess",
            "-",
            detect,
            1.0,
            None,
            f"{detect / 1000:.2f} ms (goal < 10 ms)",
        )
    )
    start, rss = trio.run(_worker_start, 3 if quick else 7)
    report.add(
        Row(
            "worker start (open_runtime)",
            "Subprocess",
            "-",
            start,
            1.0,
            None,
            f"{start / 1000:.0f} ms, {rss:.1f} MiB RSS",
        )
    )
    for name, label_ in (("blocked_thread", "InProcess sync"), ("blocked_subprocess", "Subprocess(4)")):
        timeouts, running = trio.run(_left_running, name, 40)
        report.add(
            Row(
                f"stuck calls: work left running ({label_})",
                label_,
                "-",
                float(running),
                1.0,
                None,
                f"{running} still running after {timeouts}/40 TIMEOUTs",
            )
        )
    small, large = (5, 20) if quick else (10, 40)
    cpu = trio.run(_stderr_cpu, (small, large), 1 if quick else 3)
    report.add(
        Row(
            f"stderr without newlines {large} vs {small} MB",
            f"{large} MB",
            f"{small} MB",
            cpu[large] * 1e6,
            cpu[small] * 1e6,
            4.5,
            f"runtime CPU {cpu[small]:.2f} s / {cpu[large]:.2f} s (linear: 4x; before 39x)",
        )
    )
    megabytes = 50 if quick else 200
    stall, took = trio.run(_big_result_stall, megabytes)
    report.add(
        Row(
            f"{megabytes} MB result: loop busy in one step",
            "Subprocess",
            "-",
            stall * 1e6,
            1.0,
            None,
            f"{stall * 1000:.1f} ms at most between two ticks (goal <= 50), call {took:.2f} s",
        )
    )
    if HAVE_RAY:
        threads = trio.run(_ray_threads, fan)
        report.add(
            Row(
                "threads awaiting 1,000 Ray calls",
                "Ray(2)",
                "-",
                float(threads),
                1.0,
                None,
                f"{threads} threads (goal 0)",
            )
        )
        import ray

        ray.shutdown()
        from . import bench_ray_cluster  # a multi-node cluster of its own, once the local Ray is gone

        report.extra["cluster"] = bench_ray_cluster.measure(quick)
        print("\n".join(bench_ray_cluster.lines(report.extra["cluster"])))
    return report


if __name__ == "__main__":
    report = main(quick="--quick" in sys.argv)
    report.print()
