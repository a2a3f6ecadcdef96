"""Length-prefixed frames over a byte stream (a worker's pipes): 4 bytes big-endian, then the body.

A large frame is read straight into a buffer of its size (no growing buffer, no copy after), a
pipe's worth at a time, and the loop runs at least every `YIELD_EVERY` bytes even while the
writer keeps the pipe full.
"""

from __future__ import annotations

import os

import trio

from ._protocol import MAX_FRAME

__all__ = ["FdFrames", "FrameReader"]

YIELD_EVERY = 1 << 20  # bytes read without a checkpoint, at most
_DIRECT = 1 << 16  # a frame larger than this is read into a buffer of its own size


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
    with memoryview(buffer) as view:
        body = bytes(view[4:end])  # one copy (a slice of the bytearray would be a second)
    del buffer[:end]
    return body


def _ended(buffer: bytearray) -> None:
    """The stream ended: fine between frames, corrupt in the middle of one."""
    if buffer:
        raise ValueError("the stream ended in the middle of a frame")


class _Buffered:
    """What both readers share: the bytes read past the last whole frame."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def buffered(self) -> bool:
        """Whether bytes already read wait in the buffer (the next frame may be whole there)."""
        return bool(self._buffer)


class FrameReader(_Buffered):
    """Reads whole frames from a trio receive stream."""

    __slots__ = ("_stream",)

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        super().__init__()
        self._stream = stream

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


class FdFrames(_Buffered):
    """Frames over two pipes by their file descriptors: a child's, non-blocking as trio set
    them (the hot path of a Subprocess call: a write that a pipe takes at once and a wait for
    the reply, without the two extra scheduler passes per operation of trio's streams), or a
    worker's own, blocking (it has nothing else to do while it waits for the next call).
    """

    __slots__ = ("_in", "_out")

    def __init__(self, fd_in: int, fd_out: int) -> None:
        super().__init__()
        self._in = fd_in
        self._out = fd_out

    async def write(self, data: bytes) -> None:
        """Write all of `data` (waits for room when the pipe is full)."""
        try:
            written = os.write(self._out, data)
        except BlockingIOError:
            written = 0
        if written == len(data):
            return  # the pipe took it at once (a call's request, nearly always)
        view = memoryview(data)[written:]
        while view:
            try:
                view = view[os.write(self._out, view) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self._out)

    async def reply(self) -> bytes | bytearray | None:
        """`read` right after a request was written: with nothing buffered, the answer can only
        come later, so it waits for the pipe first (no read that fails EAGAIN, no exception)."""
        if not self._buffer:
            await trio.lowlevel.wait_readable(self._in)
        return await self.read()

    async def read(self) -> bytes | bytearray | None:
        """The next frame's body, or None at the end of the stream (the other side is gone).

        Raises:
            ValueError: the stream is corrupt.
        """
        buffer = self._buffer
        if not buffer:
            try:
                chunk = os.read(self._in, 1 << 16)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._in)
            else:
                if len(chunk) >= 4 and len(chunk) == 4 + int.from_bytes(chunk[:4], "big"):
                    return chunk[4:]  # the one frame that came, whole (a call's message, nearly always)
                if not chunk:
                    return None
                buffer += chunk
        unyielded = 0
        while True:
            body = _take_frame(buffer)
            if body is not None:
                return body
            if len(buffer) >= 4 and int.from_bytes(buffer[:4], "big") > _DIRECT:
                return await self._read_large()
            if unyielded >= YIELD_EVERY:
                unyielded = 0
                await trio.lowlevel.checkpoint()
            try:
                chunk = os.read(self._in, 1 << 16)
            except BlockingIOError:
                unyielded = 0
                await trio.lowlevel.wait_readable(self._in)
                continue
            if not chunk:
                _ended(buffer)
                return None
            unyielded += len(chunk)
            buffer += chunk

    async def _read_large(self) -> bytearray:
        """The rest of a frame whose length (and perhaps some bytes) is in the buffer."""
        buffer = self._buffer
        size = int.from_bytes(buffer[:4], "big")
        if size > MAX_FRAME:
            raise ValueError(f"frame of {size} bytes: the stream is corrupt")
        body = bytearray(size)
        have = min(len(buffer) - 4, size)
        body[:have] = buffer[4 : 4 + have]
        del buffer[: 4 + have]
        unyielded = 0
        with memoryview(body) as view:
            while have < size:
                if unyielded >= YIELD_EVERY:
                    unyielded = 0
                    await trio.lowlevel.checkpoint()
                try:
                    got = os.readv(self._in, [view[have:]])
                except BlockingIOError:
                    unyielded = 0
                    await trio.lowlevel.wait_readable(self._in)
                    continue
                if not got:
                    raise ValueError("the stream ended in the middle of a frame")
                have += got
                unyielded += got
        return body
