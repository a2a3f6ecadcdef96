"""Heavy workers do not cost the runtime more than their output's size: output without newlines
(a `\\r` progress bar), and large results.

Linear cost is shown by structure (the splitter's buffer stays under one line, so each byte is
scanned once), not timed; the large-result probe measures CPU on the loop's own thread.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import placement_tools as pt
import pytest

from runtime import ToolCall, ToolSuccess, open_runtime
from runtime.placement._lines import LineSplitter
from runtime.placement._pieces import LARGE_BYTES, TEXT_CHUNK, assemble, reply_bodies
from runtime.placement._protocol import Done, Piece, Reply, decode_reply

HERE = Path(__file__).parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="worker processes: Linux")


def call(name: str, arguments: str = "{}", id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments)


class Counted(logging.Handler):
    """Counts the worker's lines and their bytes (keeps none: held records would cost the GC)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines = 0
        self.longest = 0
        self.hashes = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = str(record.args[2]) if record.args else ""  # type: ignore[index]
        self.lines += 1
        self.longest = max(self.longest, len(text))
        self.hashes += text.count("#")


async def test_worker_output_without_newlines_is_logged_whole_in_bounded_lines() -> None:
    # Before: the unfinished line was rescanned on every read, 10 / 40 MB cost 0.95 / 37.5 s (39x).
    # The cost is not timed here (a wall or CPU ratio flakes on a shared 2-core CI machine): the
    # test below shows the splitter's buffer stays bounded, so each byte is scanned once.
    counted = Counted()
    logger = logging.getLogger("runtime.placement")
    level = logger.level
    logger.setLevel(logging.INFO)  # setLevel, not `.level =`: it clears the loggers' isEnabledFor cache
    logger.addHandler(counted)
    try:
        async with open_runtime([pt.scribble], tracing=False) as rt:
            assert (await rt.call(call("scribble", '{"megabytes": 0}'))).ok  # the worker is up
            for megabytes in (10, 20):
                assert (await rt.call(call("scribble", f'{{"megabytes": {megabytes}}}'))).ok
    finally:
        logger.removeHandler(counted)
        logger.setLevel(level)
    assert counted.hashes == (10 + 20) << 20  # every byte logged, in lines of at most 16 KiB
    assert counted.longest <= 16 * 1024


def test_an_endless_line_keeps_the_splitters_buffer_bounded() -> None:
    lines = LineSplitter(max_line=1024)
    given = taken = 0
    for size in (1, 7, 100, 1023, 1024, 1025, 5000) * 200:
        chunk = b"#" * size
        given += size
        taken += sum(len(piece) for piece, whole in lines.feed(chunk) if not whole)
        assert len(lines._pending) <= 1024  # what is rescanned on the next feed: at most one line
    taken += sum(len(piece) for piece, _ in lines.close())
    assert taken == given


def test_long_lines_come_out_in_bounded_pieces_cut_between_characters() -> None:
    lines = LineSplitter(max_line=8)
    out = lines.feed(b"abc\nde") + lines.feed("fghij\u00e9klmnop\r".encode()) + lines.feed(b"\nq\rr\r\rs")
    out += lines.close()
    assert out == [
        (b"abc", True),
        (b"defghij", False),  # 8 bytes would split the two bytes of the e acute
        ("\u00e9klmnop".encode(), True),
        # \r, then \n first in the next chunk: one line end, not an empty line
        (b"q", True),
        (b"r", True),  # \r\r: the empty line between is a bar's redraw, dropped
        (b"s", True),  # the end of the stream ends the last line
    ]
    assert all(len(line) <= 8 for line, _ in out)


# -- large results --------------------------------------------------------------------------


def probe(tool: str, megabytes: int) -> dict[str, Any]:
    """Run tests/heavy_probe.py in a fresh interpreter (so its peak RSS is this result's alone)."""
    done = subprocess.run(
        [sys.executable, str(HERE / "heavy_probe.py"), tool, str(megabytes)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{HERE.parent}"},
    )
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def test_a_200_mb_result_does_not_stall_the_loop_and_costs_its_size_in_memory() -> None:
    # Before: decoded whole on the loop, 200 MB stalled trio for 0.91 s and peaked at +1.26 GB.
    got = probe("big_text", 200)
    size = 200 << 20
    print(
        f"200 MB text: loop busy at most {got['stall_cpu'] * 1000:.1f} ms between ticks "
        f"(wall gap {got['stall'] * 1000:.1f} ms), runtime CPU {got['cpu']:.2f} s, "
        f"RSS +{(got['rss_peak'] - got['rss_before']) >> 20} MB at the peak"
    )
    assert got["value_len"] == size  # the whole value reaches the caller
    assert got["content_len"] < 101_000  # the model's text is cut at max_result_chars
    # CPU time of the loop's thread between two ticks of a 1 ms ticker: what the runtime itself
    # kept the loop busy for (wall gaps also count the time this process was not scheduled,
    # which on a shared machine is anyone's guess).
    assert got["stall_cpu"] <= 0.050
    # The value itself, plus pieces in flight: not the several copies of before.
    assert got["rss_peak"] - got["rss_before"] <= 1.5 * size


async def replay(bodies: list[bytes]) -> Reply:
    """What the runtime makes of `bodies`, read one frame at a time as from a worker's pipe."""
    frames = iter(bodies)

    async def read() -> bytes | None:
        return next(frames, None)

    first = decode_reply(next(frames))
    return await assemble(first, read) if isinstance(first, Piece) else first


class Row(msgspec.Struct):
    id: int
    when: datetime.datetime
    pair: tuple[int, int]


async def test_large_results_in_pieces_are_the_values_a_small_result_would_be() -> None:
    when = datetime.datetime(2026, 12, 4, tzinfo=datetime.UTC)
    text = "a" * 300_000 + "\u00e9" * 300_000 + "\U0001f600" * 300_000  # widens twice, late
    values: list[Any] = [
        text,
        {
            "rows": [{"id": i, "pair": (i, -i), "when": when} for i in range(40_000)],
            "big": "z" * 600_000,
            7: [[1] * 300_000, b"\x00" * 100_000],
            "nested": {"deep": ["y" * 300_000, {"k": list(range(200_000))}]},
            (1, 2): "a tuple key",
        },
        [Row(id=i, when=when, pair=(i, i)) for i in range(60_000)],
        Row(id=1, when=when, pair=(1, 2)),  # small: one frame
    ]
    for value in values:
        content = value if isinstance(value, str) else f"a {type(value).__name__}"
        reply = Done(result=ToolSuccess(call_id="c", tool="t", content=content, value=value))
        bodies = list(reply_bodies(reply))
        assert len(bodies) > 1 or len(bodies[0]) <= LARGE_BYTES
        assert max(len(body) for body in bodies) <= 4 * TEXT_CHUNK + 64  # each piece is bounded
        got = await replay(bodies)
        assert isinstance(got, Done)
        assert got.result.content == content
        expected = msgspec.msgpack.decode(msgspec.msgpack.encode(value))  # what one frame gives
        assert got.result.value == expected
        assert type(got.result.value) is type(expected)


async def test_a_large_structured_result_from_a_worker_arrives_whole() -> None:
    async with open_runtime([pt.big_rows], tracing=False) as rt:
        result = await rt.call(call("big_rows", '{"megabytes": 4}'))
    assert result.ok
    rows = result.value
    assert len(rows) == 4 * 24_000
    assert rows[12_345] == {"id": 12_345, "name": "row 12345", "tags": ["a", "b"]}
    assert len(result.content) < 101_000
