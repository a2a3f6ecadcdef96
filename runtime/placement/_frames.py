"""Length-prefixed frames over a byte stream (a worker's pipes): 4 bytes big-endian, then the body."""

from __future__ import annotations

import os

import trio

from ._protocol import MAX_FRAME

__all__ = ["FdFrames", "FrameReader"]


def _take_frame(buffer: bytearray) -> bytes | None:
    """The first whole frame's body, taken off `buffer`; None while it is incomplete.

    Raises:
        ValueError: the length is past MAX_FRAME (the stream is corrupt).
    """
    if len(buffer) < 4:
        return None
    size = int.from_bytes(buffer[:4], "big")
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes: the stream is corrupt")
    end = 4 + size
    if len(buffer) < end:
        return None
    body = bytes(buffer[4:end])
    del buffer[:end]
    return body


def _ended(buffer: bytearray) -> None:
    """The stream ended: fine between frames, corrupt in the middle of one."""
    if buffer:
        raise ValueError("the stream ended in the middle of a frame")


class FrameReader:
    """Reads whole frames from a trio receive stream."""

    __slots__ = ("_buffer", "_stream")

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def read(self) -> bytes | None:
        """The next frame's body, or None at the end of the stream (the other side is gone).

        Raises:
            ValueError: the stream is corrupt (a length past MAX_FRAME, or it ended mid-frame).
        """
        buffer = self._buffer
        while True:
            body = _take_frame(buffer)
            if body is not None:
                return body
            chunk = await self._stream.receive_some(1 << 16)
            if not chunk:
                _ended(buffer)
                return None
            buffer += chunk


class FdFrames:
    """Frames over a child's pipes by their file descriptors (non-blocking, as trio set them).

    The hot path of a Subprocess call: a write that a pipe takes at once and a wait for the
    reply, without the two extra scheduler passes per operation of trio's streams.
    """

    __slots__ = ("_buffer", "_in", "_out")

    def __init__(self, fd_in: int, fd_out: int) -> None:
        self._in = fd_in
        self._out = fd_out
        self._buffer = bytearray()

    async def write(self, data: bytes) -> None:
        """Write all of `data` (waits for room when the pipe is full)."""
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._out, view) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self._out)

    async def read(self) -> bytes | None:
        """The next frame's body, or None at the end of the stream (the child is gone).

        Raises:
            ValueError: the stream is corrupt.
        """
        buffer = self._buffer
        while True:
            body = _take_frame(buffer)
            if body is not None:
                return body
            try:
                chunk = os.read(self._in, 1 << 16)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._in)
                continue
            if not chunk:
                _ended(buffer)
                return None
            buffer += chunk
