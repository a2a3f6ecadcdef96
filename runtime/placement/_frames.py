"""Length-prefixed frames over a byte stream (a worker's pipes): 4 bytes big-endian, then the body."""

from __future__ import annotations

import trio

from ._protocol import MAX_FRAME

__all__ = ["FrameReader"]


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
            if len(buffer) >= 4:
                size = int.from_bytes(buffer[:4], "big")
                if size > MAX_FRAME:
                    raise ValueError(f"frame of {size} bytes: the stream is corrupt")
                end = 4 + size
                if len(buffer) >= end:
                    body = bytes(buffer[4:end])
                    del buffer[:end]
                    return body
            chunk = await self._stream.receive_some(1 << 16)
            if not chunk:
                if buffer:
                    raise ValueError("the stream ended in the middle of a frame")
                return None
            buffer += chunk
