"""The one test for "this exception is trio cancelling us", used wherever a tool's exception is caught.

Code that runs a tool catches everything the tool raises (KeyboardInterrupt included: a tool's
own). What it must never swallow is trio's cancellation of the task it runs in, alone or inside
an exception group: that is re-raised so the cancel scope that asked for it can catch it.
"""

from __future__ import annotations

import trio

__all__ = ["is_cancellation", "reraise_own_cancellation"]


def is_cancellation(exc: BaseException) -> bool:
    """True for a `trio.Cancelled`, or an exception group holding one."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(trio.Cancelled) is not None
    return False


async def reraise_own_cancellation(exc: BaseException) -> None:
    """Raise trio's Cancelled if `exc` is a cancellation and this task is being cancelled;
    return if it is not (a Cancelled the tool raised that is not its own: the tool's error)."""
    if is_cancellation(exc):
        await trio.lowlevel.checkpoint_if_cancelled()
