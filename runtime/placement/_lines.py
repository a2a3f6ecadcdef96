"""Lines out of a byte stream (a worker's stderr), in time linear in the bytes, in bounded memory.

A worker may write for ever without a newline (a `\\r` progress bar, tqdm, a binary blob): the
unfinished line is kept in one buffer that only the new bytes are scanned in, and a line longer
than `max_line` comes out in pieces of at most `max_line` bytes (cut on a UTF-8 character
boundary). `\\n`, `\\r\\n` and a lone `\\r` each end a line (a progress bar's updates are lines);
an empty line ended by `\\r` is dropped (a bar that starts with `\\r`).
"""

from __future__ import annotations

import re

__all__ = ["MAX_LINE", "LineSplitter"]

MAX_LINE = 16 * 1024  # bytes: a longer line is logged in pieces of this size
_END = re.compile(rb"\r\n|\r|\n")


class LineSplitter:
    """Feed it chunks; it gives back `(line, whole)` pairs: `whole` is False for a piece of a line
    that was cut at `max_line` (more of that line follows)."""

    __slots__ = ("_after_cr", "_max", "_pending")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        if max_line < 4:
            raise ValueError(f"max_line must be at least 4 bytes, not {max_line}")
        self._max = max_line
        self._pending = bytearray()
        self._after_cr = False  # the last chunk ended with \r: a \n first in the next one is its pair

    def feed(self, chunk: bytes | bytearray) -> list[tuple[bytes, bool]]:
        """The lines that `chunk` completes (and the pieces of over-long ones), in order."""
        out: list[tuple[bytes, bool]] = []
        start = 0
        if self._after_cr and chunk[:1] == b"\n":
            start = 1
        self._after_cr = False
        pending = self._pending
        for match in _END.finditer(chunk, start):
            self._append(chunk, start, match.start(), out)
            ender = match.group()
            if pending or ender != b"\r":
                out.append((bytes(pending), True))
            pending.clear()
            start = match.end()
        if start < len(chunk):
            self._append(chunk, start, len(chunk), out)
        self._after_cr = chunk.endswith(b"\r")
        return out

    def close(self) -> list[tuple[bytes, bool]]:
        """The unfinished last line, if any (the stream ended)."""
        out: list[tuple[bytes, bool]] = []
        if self._pending:
            out.append((bytes(self._pending), True))
            self._pending.clear()
        return out

    def _append(self, chunk: bytes | bytearray, start: int, end: int, out: list[tuple[bytes, bool]]) -> None:
        """Add chunk[start:end] to the unfinished line, cutting off whole pieces of `max_line`."""
        pending = self._pending
        limit = self._max
        while end - start > limit - len(pending):
            take = limit - len(pending)
            pending += chunk[start : start + take]
            cut = _boundary(pending)
            out.append((bytes(pending[:cut]), False))
            del pending[:cut]  # what follows the cut (at most 3 bytes) starts the next piece
            start += take
        pending += chunk[start:end]


def _boundary(piece: bytearray) -> int:
    """Where to cut `piece` so that no UTF-8 character is split: before a trailing partial one."""
    end = len(piece)
    for back in range(1, 4):
        if end - back < 0:
            break
        byte = piece[end - back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: a character starts here
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return end if need <= back else end - back
    return end
