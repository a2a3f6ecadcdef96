"""What a program may use: `CodeLimits`, every field set by default (the sandbox's own have none)."""

from __future__ import annotations

from typing import Annotated, TypedDict

import msgspec

__all__ = ["CodeLimits", "CodeLimitsKw"]

Seconds = Annotated[float, msgspec.Meta(gt=0)]
Count = Annotated[int, msgspec.Meta(ge=1)]
Bytes = Annotated[int, msgspec.Meta(ge=1024)]


class CodeLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The limits of one program of a code tool (`code_mode(**limits)`).

    Attributes:
        timeout: wall-clock seconds a program may take (the code tool's `timeout`: the call's
            deadline is the earlier of this and its caller's); a program still running then is
            stopped, its worker killed, and the call fails TIMEOUT.
        max_memory: bytes of heap the program may hold; beyond, a MemoryError in the program.
        max_recursion: the depth of nested calls; beyond, a RecursionError in the program.
        max_suspensions: times the program may stop for the host (each tool call is one or
            two: the call and, unless already settled, its wait); beyond, it is stopped.
        max_calls: tool calls one program may make; the next raises RuntimeError in the program.
        max_output: bytes the program may print; beyond, it is stopped.
        workers: programs that run at once (sandbox worker processes); more wait their turn.
        clock: whether the program may read the clock (`time.time()`, `datetime.now()`).
    """

    timeout: Seconds = 30.0
    max_memory: Bytes = 64 * 1024 * 1024
    max_recursion: Count = 200
    max_suspensions: Count = 1000
    max_calls: Count = 100
    max_output: Bytes = 1024 * 1024
    workers: Count = 2
    clock: bool = True

    @classmethod
    def build(cls, **limits: object) -> CodeLimits:
        """Validated limits from keywords.

        Raises:
            ValueError: a limit that is unknown or out of range, naming it.
        """
        try:
            return msgspec.convert(limits, cls)
        except msgspec.ValidationError as exc:
            raise ValueError(f"code_mode: {exc}") from None


class CodeLimitsKw(TypedDict, total=False):
    """`CodeLimits` as typed keywords of `code_mode(...)`."""

    timeout: float
    max_memory: int
    max_recursion: int
    max_suspensions: int
    max_calls: int
    max_output: int
    workers: int
    clock: bool
