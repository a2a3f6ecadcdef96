"""Flows: logic written once as a generator, driven from sync and async code (httpx's auth flow).

A flow yields each awaitable it needs and gets back its value, or has its exception thrown in;
it returns its result. The same flow runs two ways:

    drive_now(flow)               # here: each awaitable run to its end in one step
    value = await drive(flow)     # awaiting each awaitable

`drive_now` is the same flow that did not have to wait: it is for flows that return nothing and
whose every step can end without suspending (a `MemoryStore`'s steps, hooks whose code has no `await`); a step that
would suspend is closed, and `CannotWait` is thrown into the flow at that point. The engine's
policy chain and its features' hooks, the resilience policies' store steps and the keeping of
artifacts are each one flow, driven one way or the other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from typing import Any, TypeVar

import trio

__all__ = ["CannotWait", "Flow", "drive", "drive_now", "now"]

T = TypeVar("T")

Flow = Generator[Awaitable[Any], Any, T]
"""A flow that returns a T: it yields awaitables, and gets each one's value back (or its error)."""


class CannotWait(RuntimeError):
    """A flow driven by `drive_now` yielded a step that would suspend."""


def now(step: Awaitable[T]) -> T:
    """The value of an awaitable that ends without suspending, run here in one step.

    Raises:
        CannotWait: it would suspend (it is closed: nothing of it runs on).
    """
    coro: Any = step
    try:
        coro.send(None)
    except StopIteration as stop:
        value: T = stop.value
        return value
    coro.close()
    raise CannotWait(f"{step!r} would wait where nothing can wait")


def drive_now(flow: Flow[None]) -> None:
    """Run `flow` here: each step it yields is run to its end in one step (`now`).

    What a step raises is thrown into the flow; so is `CannotWait` for a step that would
    suspend. A BaseException that is not an Exception (KeyboardInterrupt) closes the flow and
    goes on. Flows run here return nothing (the engine's hooks: what they do is their
    result), so a flow that yields no step, the usual one, ends in a `for` with no
    StopIteration to make and catch (that was a third of the cost of driving it).
    """
    for step in flow:
        _drive_from(flow, step)
        return


def _drive_from(flow: Flow[None], step: Awaitable[Any]) -> None:
    """`drive_now` once `flow` yielded its first step."""
    while True:
        value: Any = None
        error: BaseException | None = None
        try:
            value = now(step)
        except Exception as exc:
            error = exc
        except BaseException:
            flow.close()
            raise
        try:
            step = flow.send(value) if error is None else flow.throw(error)
        except StopIteration:
            return


_NOTHING: Any = object()


async def drive(flow: Flow[T], *, pending: Any = _NOTHING, finish_within: float | None = None) -> T:
    """Run `flow`, awaiting each step it yields and sending back its value (or throwing in its
    exception). `pending`: the step the flow yielded already, when it was started here (it is
    awaited first).

    A cancellation (or another BaseException) while a step is awaited is thrown into the flow
    and goes on from it. With `finish_within` (seconds), the flow is finished first instead:
    its later steps are awaited shielded, within that long, and the cancellation is raised
    once it has ended (a flow of finishing hooks: no feature is left with a call it never
    hears the end of).
    """
    value: Any = None
    error: BaseException | None = None
    stopped: BaseException | None = None
    grace = 0.0
    step = pending
    try:
        while True:
            if step is _NOTHING:
                try:
                    step = flow.send(value) if error is None else flow.throw(error)
                except StopIteration as stop:
                    result: T = stop.value
                    break
            value, error = None, None
            try:
                if stopped is None:
                    value = await step
                else:
                    with trio.CancelScope(shield=True, deadline=grace):
                        value = await step
                step = _NOTHING
            except Exception as exc:
                step = _NOTHING
                error = exc
            except BaseException as exc:
                step = _NOTHING
                if finish_within is None:
                    error = exc  # thrown in: the flow ends with it (or handles it)
                elif stopped is None:
                    stopped = exc
                    grace = trio.current_time() + finish_within
    finally:
        flow.close()
    if stopped is not None:
        raise stopped
    return result
