"""Code mode (issue 45): a call made from a program, and a program's start, against floors
measured in the same run.

- a call from a program: a program of N sequential `await add(a=i, b=1)`, less an empty
  program's time, per call. Floor: the same call made directly, `rt.call`, one after another.
  What the program's call adds is the sandbox's two turns (the call's stop, then its future's)
  and their thread hops.
- a call in a `gather` of 50: a program that gathers 50 calls, less an empty program's time,
  per call. Floor: `rt.call_many` of the same 50 calls, per call.
- a call in a gather of 50 under `Budget(per_batch=8)`: the same program on a runtime with that
  budget (a program's calls are one batch: 8 run at once, the others wait their turn), less an
  empty program's time, per call. Floor: `rt.call_many` of the same 50 calls on that runtime.
- a run's start: `rt.call` of `run_code` with the program `1`. Floor: the sandbox's own run of
  it, as directly as its API allows: a session checked out of a warm pool of its own,
  `feed_run("1")`, given back, in one worker thread (one hop).

Each ratio is subject / floor, both medians of interleaved repetitions.
"""

from __future__ import annotations

import statistics
import time

import pydantic_monty as monty
import trio

from runtime import Budget, ToolCall, open_runtime, tool
from runtime.code import code_mode

from ._harness import Report, Row


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _program(code: str) -> ToolCall:
    return ToolCall(id="p", name="run_code", arguments={"code": code})


async def _seconds(rt: object, call: ToolCall) -> float:
    began = time.perf_counter()
    result = await rt.call(call)  # type: ignore[attr-defined]
    took = time.perf_counter() - began
    assert result.ok, result
    return took


async def _direct(rt: object, n: int) -> float:
    began = time.perf_counter()
    for i in range(n):
        await rt.call(ToolCall(id=f"d{i}", name="add", arguments={"a": i, "b": 1}))  # type: ignore[attr-defined]
    return time.perf_counter() - began


async def _many(rt: object, n: int) -> float:
    calls = [ToolCall(id=f"m{i}", name="add", arguments={"a": i, "b": 1}) for i in range(n)]
    began = time.perf_counter()
    await rt.call_many(calls)  # type: ignore[attr-defined]
    return time.perf_counter() - began


def _sandbox_floor(pool: monty.Monty) -> float:
    began = time.perf_counter()
    with pool.checkout() as session:
        session.feed_run("1")
    return time.perf_counter() - began


def main(quick: bool = False) -> Report:
    report = Report("code")
    n = 50 if quick else 200
    rounds = 5 if quick else 25
    repeats = 3 if quick else 7
    sequential = _program(f"for i in range({n}):\n    await add(a=i, b=1)")
    gathered = _program("import asyncio\nawait asyncio.gather(*[add(a=i, b=1) for i in range(50)])")
    empty = _program("1")

    async def run() -> None:
        run_code = code_mode(max_calls=10_000, max_suspensions=100_000, workers=1)
        pool = monty.Monty(min_processes=1, max_processes=1)
        await trio.to_thread.run_sync(pool.__enter__)
        async with open_runtime([add, run_code], tracing=False) as rt:
            for _ in range(3):  # warm up: the pool's worker, the thread cache, the stubs
                await _seconds(rt, sequential)
                await _direct(rt, n)
            starts, floors_start, per_call, floors_call, per_gathered, floors_many = [], [], [], [], [], []
            await trio.to_thread.run_sync(_sandbox_floor, pool)
            for _ in range(repeats):
                start = statistics.median([await _seconds(rt, empty) for _ in range(rounds)])
                starts.append(start)
                floors_start.append(
                    statistics.median(
                        [await trio.to_thread.run_sync(_sandbox_floor, pool) for _ in range(rounds)]
                    )
                )
                per_call.append((await _seconds(rt, sequential) - start) / n)
                floors_call.append(await _direct(rt, n) / n)
                per_gathered.append((await _seconds(rt, gathered) - start) / 50)
                floors_many.append(await _many(rt, 50) / 50)
            subject, floor = statistics.median(per_call), statistics.median(floors_call)
            report.add(
                Row(
                    "code: a call from a program",
                    "run_code",
                    "rt.call",
                    subject * 1e6,
                    floor * 1e6,
                    None,
                    f"{subject * 1e6:.0f} us a call awaited in a program ({n} in a row), {floor * 1e6:.1f} us direct",
                )
            )
            subject, floor = statistics.median(per_gathered), statistics.median(floors_many)
            report.add(
                Row(
                    "code: a call in a gather of 50",
                    "run_code",
                    "call_many",
                    subject * 1e6,
                    floor * 1e6,
                    None,
                    f"{subject * 1e6:.0f} us a call of a 50-call asyncio.gather, {floor * 1e6:.1f} us in call_many",
                )
            )
            subject, floor = statistics.median(starts), statistics.median(floors_start)
            report.add(
                Row(
                    "code: a run's start",
                    "run_code",
                    "feed_run",
                    subject * 1e6,
                    floor * 1e6,
                    None,
                    f"{subject * 1000:.2f} ms for the program `1`; the sandbox alone {floor * 1000:.2f} ms",
                )
            )

        async with open_runtime([add, run_code], budget=Budget(per_batch=8), tracing=False) as rt:
            for _ in range(3):
                await _seconds(rt, gathered)
            per_batched, floors_batched = [], []
            for _ in range(repeats):
                start = statistics.median([await _seconds(rt, empty) for _ in range(rounds)])
                per_batched.append((await _seconds(rt, gathered) - start) / 50)
                floors_batched.append(await _many(rt, 50) / 50)
            subject, floor = statistics.median(per_batched), statistics.median(floors_batched)
            report.add(
                Row(
                    "code: a gather of 50, per_batch=8",
                    "run_code",
                    "call_many",
                    subject * 1e6,
                    floor * 1e6,
                    None,
                    f"{subject * 1e6:.0f} us a call of a 50-call gather, 8 at once; "
                    f"{floor * 1e6:.1f} us in call_many under the same budget",
                )
            )

        await trio.to_thread.run_sync(pool.__exit__, None, None, None)

    trio.run(run)
    return report


if __name__ == "__main__":
    r = main()
    r.print()
    print(f"\nwrote {r.save()}")
