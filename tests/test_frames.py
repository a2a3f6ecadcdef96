"""`FdFrames`: length-prefixed frames over a pipe, as a Subprocess call reads its worker's reply."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from runtime.placement._frames import FdFrames


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):  # closed by the test already
            os.close(fd)


async def test_a_reply_that_arrives_whole_is_read_in_one_piece(pipe: tuple[int, int]) -> None:
    r, w = pipe
    frames = FdFrames(r, w)
    os.write(w, _frame(b"hello"))
    assert await frames.reply() == b"hello"


async def test_a_reply_written_in_two_parts_is_put_together(pipe: tuple[int, int]) -> None:
    r, w = pipe
    frames = FdFrames(r, w)
    whole = _frame(b"x" * 1000)
    os.write(w, whole[:3])  # not even the whole length yet

    async def rest() -> None:
        await trio.testing.wait_all_tasks_blocked()
        os.write(w, whole[3:500])
        await trio.testing.wait_all_tasks_blocked()
        os.write(w, whole[500:])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(rest)
        assert await frames.reply() == b"x" * 1000


async def test_two_frames_in_one_read_are_both_answered_in_order(pipe: tuple[int, int]) -> None:
    r, w = pipe
    frames = FdFrames(r, w)
    os.write(w, _frame(b"first") + _frame(b"second"))
    assert await frames.reply() == b"first"
    assert await frames.reply() == b"second"  # buffered: no wait on the pipe for it


async def test_the_end_of_the_stream_is_none_between_frames_and_an_error_inside_one(
    pipe: tuple[int, int],
) -> None:
    r, w = pipe
    frames = FdFrames(r, w)
    os.write(w, _frame(b"last"))
    os.close(w)
    assert await frames.reply() == b"last"
    assert await frames.reply() is None

    r2, w2 = os.pipe()
    os.set_blocking(r2, False)
    try:
        cut = FdFrames(r2, w2)
        os.write(w2, _frame(b"cut short")[:7])
        os.close(w2)
        with pytest.raises(ValueError, match="middle of a frame"):
            await cut.reply()
    finally:
        os.close(r2)


async def test_a_length_past_the_limit_is_a_corrupt_stream(pipe: tuple[int, int]) -> None:
    r, w = pipe
    frames = FdFrames(r, w)
    os.write(w, (1 << 31).to_bytes(4, "big") + b"junk")
    with pytest.raises(ValueError, match="corrupt"):
        await frames.reply()


async def test_a_frame_larger_than_the_pipe_waits_for_room_and_arrives_whole() -> None:
    """The first write takes what the pipe holds (64 KiB here); the rest waits until the other
    side reads, and the frame arrives whole and in order."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    try:
        writer, reader = FdFrames(r, w), FdFrames(r, w)
        body = bytes(range(256)) * 4096  # 1 MiB
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.write, _frame(body))
            assert await reader.read() == body
    finally:
        os.close(r)
        os.close(w)
