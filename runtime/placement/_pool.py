"""The lifecycle a placement's pool of members shares (Subprocess workers, Ray replicas).

    open        `open_pool`: the pool's nursery for its background tasks; leaving stops every member
    start       `target` members start together; the first that cannot is the reason it raises
    a start     that fails for want of a resource of this process (fds, memory, processes): tried
                again after a capped backoff, not counted as a crash
    a loss      a member that died on its own is counted toward the restart intensity and replaced
                after the restart backoff (a replacement that fails to start counts too); too
                many: the tool is down and nothing more starts

What a member is, how it starts, serves and stops is the subclass's (`_start_one`, `_stop_one`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar, Generic, ParamSpec, TypeVar

import trio

from ..tools.lowlevel import PlacementHost

__all__ = ["ReplicaPool", "open_pool"]

log = logging.getLogger("runtime.placement")

SHORTAGE = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN})  # of this process: it passes

M = TypeVar("M")
P = ParamSpec("P")
PoolT = TypeVar("PoolT", bound="ReplicaPool[Any]")


@contextlib.asynccontextmanager
async def open_pool(make: Callable[P, PoolT], *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[PoolT]:
    """`make(*args, **kwargs)`, serving inside its nursery; on the way out every member is stopped."""
    pool = make(*args, **kwargs)
    async with trio.open_nursery() as nursery:
        pool.nursery = nursery
        try:
            yield pool
        finally:
            with trio.CancelScope(shield=True):
                await pool.stop_all()
            nursery.cancel_scope.cancel()


class ReplicaPool(Generic[M]):
    """The members (of type `M`) of one tool actor's incarnation: started, replaced, stopped.

    Attributes:
        what: a member in logs and in the reasons given to the host ("worker", "Ray replica").
        start_errors: what a failed start raises (anything else is a bug, and propagates).
        target: members it aims to have.
        starting: members being started, or waiting for their restart backoff.
        lost: members that died on their own.
        closing: `stop_all` has begun: nothing more starts, and a loss is not counted.
        down: the tool went down (too many losses): nothing more starts.
    """

    what: ClassVar[str]
    start_errors: ClassVar[tuple[type[Exception], ...]] = (Exception,)
    nursery: trio.Nursery

    def __init__(self, name: str, host: PlacementHost, target: int) -> None:
        self.name = name
        self.host = host
        self.target = target
        self.starting = 0
        self.lost = 0
        self.closing = False
        self.down = False

    # -- the subclass's ----------------------------------------------------------------

    async def _start_one(self) -> None:
        """Start one member and let it take calls.

        Raises:
            one of `start_errors` if it did not get ready (OSError: it could not start at all).
        """
        raise NotImplementedError

    async def _stop_one(self, member: M) -> None:
        """Stop `member` (its teardown() runs within the stop timeout), then make sure it is gone."""
        raise NotImplementedError

    def _members(self) -> list[M]:
        """Every member there is (serving, starting, draining), for `stop_all` to stop."""
        raise NotImplementedError

    def _gone(self, member: M) -> bool:
        """`member` died on its own: take it out of service. False if that was known already."""
        raise NotImplementedError

    def _label(self, member: M) -> str:
        """`member` in a log line: 'worker (pid 12)'."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start `target` members; they start (and set up) together.

        Raises:
            the first reason a member did not start (its setup's exception, rebuilt).
        """
        failed: list[BaseException] = []

        async def one() -> None:
            try:
                await self._add()
            except self.start_errors as exc:
                failed.append(exc)
            finally:
                self.starting -= 1

        async with trio.open_nursery() as starting:
            for _ in range(self.target):
                self.starting += 1
                starting.start_soon(one)
        if failed:
            raise failed[0]

    async def _add(self) -> None:
        """Start a member. A start this process cannot make for want of a resource (no file
        descriptors, memory or processes left: a shortage that passes) is tried again after a
        capped exponential backoff and never counts as a crash."""
        delay = 0.0
        while True:
            try:
                await self._start_one()
                return
            except OSError as exc:
                if exc.errno not in SHORTAGE or self.closing:
                    raise
                delay = self.host.start_delay(delay)
                log.warning(
                    "tool %r: a %s could not start (%s); trying again in %gs",
                    self.name,
                    self.what,
                    exc,
                    delay,
                )
                await trio.sleep(delay)

    def _start(self, delay: float = 0.0) -> None:
        """Start a member in the background after `delay` seconds (unless closing or down)."""
        if self.closing or self.down:
            return
        self.starting += 1
        self.nursery.start_soon(self._start_later, delay)

    async def _start_later(self, delay: float) -> None:
        """Start a member after `delay` seconds; a start that fails is counted as a crash and
        tried again after the restart backoff. `starting` was counted up by `_start`."""
        try:
            while not self.closing and not self.down:
                await trio.sleep(delay)
                try:
                    await self._add()
                    return
                except self.start_errors as exc:
                    log.warning("tool %r: a new %s failed to start: %s", self.name, self.what, exc)
                    next_delay = self.host.worker_lost(f"a new {self.what} failed to start: {exc}")
                    if next_delay is None:
                        self.down = True
                        return
                    delay = next_delay
        finally:
            self.starting -= 1

    def _lost(self, member: M, cause: str) -> None:
        """`member` died on its own ('was killed by SIGSEGV'): counted toward the restart
        intensity and replaced after the restart backoff (unless the tool is now down)."""
        if not self._gone(member) or self.closing:
            return
        self.lost += 1
        what = f"{self._label(member)} {cause}"
        log.warning("tool %r: %s", self.name, what)
        delay = self.host.worker_lost(what)
        if delay is None:
            self.down = True
        else:
            self._start(delay)

    async def stop_all(self) -> None:
        """Stop every member together (each runs teardown(); killed if it takes too long)."""
        self.closing = True
        async with trio.open_nursery() as nursery:
            for member in self._members():
                nursery.start_soon(self._stop_one, member)
