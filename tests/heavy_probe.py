"""Run in a child interpreter by tests/test_placement_heavy.py: one large result through a fresh
runtime, measured from inside (the longest gap between two ticks of the trio loop, this
process's resident memory before, at its peak and after). Prints one JSON object.

    python tests/heavy_probe.py TOOL MEGABYTES
"""

from __future__ import annotations

import json
import sys
import time

import placement_tools as pt
import trio

from runtime import ToolCall, open_runtime

TICK = 0.001  # the ticker's sleep: a gap above this is time the loop could not run


def memory(field: str) -> int:
    """`VmRSS` (now) or `VmHWM` (the peak) of this process, in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise LookupError(field)


async def main(name: str, megabytes: int) -> dict[str, object]:
    tool = getattr(pt, name)
    async with open_runtime([tool], tracing=False) as rt:
        assert (await rt.call(ToolCall(id="warm", name=name, arguments='{"megabytes": 0}'))).ok
        before = memory("VmRSS")
        longest = 0.0  # wall time between two ticks: includes time this process was not scheduled
        busiest = 0.0  # CPU time of this thread between two ticks: what the loop itself spent
        async with trio.open_nursery() as nursery:

            async def tick() -> None:
                nonlocal longest, busiest
                last, last_cpu = time.perf_counter(), time.thread_time()
                while True:
                    await trio.sleep(TICK)
                    now, now_cpu = time.perf_counter(), time.thread_time()
                    longest = max(longest, now - last)
                    busiest = max(busiest, now_cpu - last_cpu)
                    last, last_cpu = now, now_cpu

            nursery.start_soon(tick)
            await trio.sleep(0.05)
            began = time.perf_counter()
            cpu = time.thread_time()
            result = await rt.call(ToolCall(id="big", name=name, arguments=f'{{"megabytes": {megabytes}}}'))
            took = time.perf_counter() - began
            cpu = time.thread_time() - cpu
            await trio.sleep(0.05)  # what the engine does right after the result counts too
            nursery.cancel_scope.cancel()
        assert result.ok, result
        peak = memory("VmHWM")
        size = len(result.value) if isinstance(result.value, str | list) else -1
        content = len(result.content)
        del result
        after = memory("VmRSS")
    return {
        "stall": longest,
        "stall_cpu": busiest,
        "seconds": took,
        "cpu": cpu,
        "rss_before": before,
        "rss_peak": peak,
        "rss_after": after,
        "value_len": size,
        "content_len": content,
    }


if __name__ == "__main__":
    if "--no-gc" in sys.argv:
        import gc

        gc.disable()
    print(json.dumps(trio.run(main, sys.argv[1], int(sys.argv[2]))))
