"""Load: 100,000 calls through one runtime in waves of 1,000, with bounded memory and no leak.

tracemalloc makes every allocation several times dearer, so it watches the first ten waves
(start-up and the pool's growth: the peak) and the last ten (what a wave leaves behind), while
`sys.getallocatedblocks()`, which costs nothing, compares the whole run after wave 10 and
after wave 100. A leak of one small object per call would show as 90,000 blocks.
"""

import gc
import sys
import tracemalloc

import trio

from runtime import ToolCall, ToolSuccess, open_runtime, tool

WAVES = 100
WAVE_SIZE = 1_000
TRACED = 10  # waves watched by tracemalloc at the start and at the end
PEAK_BOUND = 64 * 1024 * 1024  # bytes of traced memory; a wave of 1,000 parked calls needs well under 1 MiB
KEPT_BOUND = 128 * 1024  # bytes allocated during the last waves and still held after them
BLOCKS_TOLERANCE = 64  # blocks gained from wave 10 to 100 (one object kept per wave would be 90)


@tool
async def double(n: int) -> int:
    """Twice n."""
    await trio.lowlevel.checkpoint()  # a real suspension: a wave's calls are parked in workers at once
    return 2 * n


@tool(inline=True)
def negate(n: int) -> int:
    """Minus n."""
    return -n


# One wave's calls, sent again every wave: the runtime must keep nothing of them.
CALLS = [
    ToolCall(id=f"c{i}", name="double" if i % 4 else "negate", arguments=f'{{"n": {i}}}')
    for i in range(WAVE_SIZE)
]
EXPECTED = [
    ToolSuccess(call_id=c.id, tool=c.name, content=str(v), value=v)
    for c, v in zip(CALLS, (2 * i if i % 4 else -i for i in range(WAVE_SIZE)), strict=True)
]


def settled_blocks() -> int:
    gc.collect()
    return sys.getallocatedblocks()


async def test_a_hundred_thousand_calls_run_in_bounded_memory_without_leaking() -> None:
    peaks: list[int] = []
    kept = 0
    blocks_after_wave_10 = blocks_after_wave_100 = 0
    tracemalloc.start()
    try:
        async with open_runtime([double, negate], tracing=False) as rt:
            for wave in range(1, WAVES + 1):
                if wave == WAVES - TRACED + 1:
                    gc.collect()
                    tracemalloc.start()
                    tracemalloc.reset_peak()
                results = await rt.call_many(CALLS)
                assert results == EXPECTED
                del results
                if wave == TRACED:
                    peaks.append(tracemalloc.get_traced_memory()[1])
                    tracemalloc.stop()
                    blocks_after_wave_10 = settled_blocks()
            gc.collect()
            kept, peak = tracemalloc.get_traced_memory()
            peaks.append(peak)
            tracemalloc.stop()
            blocks_after_wave_100 = settled_blocks()
            stats = rt.statistics()
    finally:
        tracemalloc.stop()
    assert stats.tools["double"].succeeded == WAVES * WAVE_SIZE * 3 // 4
    assert stats.tools["negate"].succeeded == WAVES * WAVE_SIZE // 4
    assert stats.tools["double"].calls + stats.tools["negate"].calls == WAVES * WAVE_SIZE
    assert (stats.in_flight, stats.tools["double"].queued) == (0, 0)
    assert all(0 < p < PEAK_BOUND for p in peaks), [f"{p / 2**20:.2f} MiB" for p in peaks]
    assert kept < KEPT_BOUND, f"the last {TRACED} waves left {kept / 1024:.0f} KiB behind"
    growth = blocks_after_wave_100 - blocks_after_wave_10
    assert growth < BLOCKS_TOLERANCE, f"{growth} more memory blocks after wave 100 than after wave 10"


def test_a_call_has_no_dict_of_its_own() -> None:
    """A parked call is one `Call` object: its halves (`Waiting`, `Attempts`) add no slots, so it
    keeps no `__dict__` or weak-reference slot beside its own (W4 counts bytes per parked call)."""
    from runtime.engine._call import Call

    assert (Call.__dictoffset__, Call.__weakrefoffset__) == (0, 0)
