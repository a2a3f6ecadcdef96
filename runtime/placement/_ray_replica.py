"""One Ray replica of a placed tool: the actor class Ray runs (imported there by module path).

It holds a `ToolHost`, speaks the same messages as a Subprocess worker (msgspec bytes in and
out) and never raises: a tool's exception comes back boxed. It is an async Ray actor, so that
`ray.cancel` of one call reaches that call alone (as `asyncio.CancelledError` in its task):

    an async tool  runs on a trio loop of the replica's own (one thread); a cancelled call's
                   trio task is cancelled, and the call ends once the tool has stopped
    a sync tool    runs in a thread of the replica's (one per call at most); a thread cannot be
                   stopped, so a cancelled call ends when the tool returns

Either way the runtime waits a grace for the cancelled call to end and kills the replica only
if it does not (`_ray_link.stop_call`); the replica's other calls go on untouched. `setup()` and
`teardown()` run on the trio loop too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import pickle
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from ._host import ToolHost, box
from ._pieces import reply_buffer
from ._protocol import Load, Ready, decode_to_worker, encode

__all__ = ["Replica"]

T = TypeVar("T")

_THREADS = 1024  # threads for sync calls, made only as needed: Ray's max_concurrency bounds them


class Replica:
    """A tool in a Ray actor. Ray calls `ready()` once, then `call()` per call, then `stop()`."""

    def __init__(self, load_bytes: bytes) -> None:
        load = decode_to_worker(load_bytes)
        assert isinstance(load, Load)
        sys.path[:0] = [p for p in load.sys_path if p not in sys.path]
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._done: trio.Event | None = None
        self._threads = concurrent.futures.ThreadPoolExecutor(
            _THREADS, thread_name_prefix="tool-runtime-call"
        )
        started = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, args=(started,), name="tool-runtime-trio", daemon=True
        )
        self._thread.start()
        started.wait()
        self._ready: bytes
        try:
            self.host = ToolHost(load)
            trio.from_thread.run(self.host.setup, trio_token=self._token)
        except Exception as exc:
            self._ready = encode(box(exc))
        else:
            self._ready = encode(Ready(pid=os.getpid(), node=_node_id()))

    def _loop(self, started: threading.Event) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._done = trio.Event()
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                started.set()
                await self._done.wait()
                nursery.cancel_scope.cancel()

        trio.run(main)

    async def ready(self) -> bytes:
        """Ready (with the pid), or the exception that `setup()` raised, boxed."""
        return self._ready

    async def call(self, request_bytes: bytes) -> bytes | pickle.PickleBuffer:
        request = decode_to_worker(request_bytes)
        host = self.host
        if host.is_async:
            reply = await self._on_trio(host.serve, request)
        else:
            reply = await _to_end(
                asyncio.get_running_loop().run_in_executor(self._threads, host.serve_sync, request)
            )
        return reply_buffer(reply)  # a large one out of band: no copy on its way to the driver

    async def stop(self) -> None:
        """Run `teardown()` and end the replica's trio loop."""
        try:
            await self._on_trio(self.host.teardown)
        finally:
            if self._done is not None and self._token is not None:
                self._token.run_sync_soon(self._done.set)
            self._threads.shutdown(wait=False)

    async def _on_trio(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run `fn(*args)` as a task of the replica's trio loop; cancelling this coroutine (what
        `ray.cancel` does) cancels that task, and this returns once it has ended."""
        token, nursery = self._token, self._nursery
        assert token is not None
        assert nursery is not None
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[T] = loop.create_future()
        scope = trio.CancelScope()

        def settle(value: Any, error: BaseException | None) -> None:
            if ended.done():
                return
            if isinstance(error, trio.Cancelled):
                ended.cancel()  # the tool stopped on its cancellation
            elif error is not None:
                ended.set_exception(error)
            else:
                ended.set_result(value)

        async def run() -> None:
            value: Any = None
            error: BaseException | None = None
            with scope:
                try:
                    value = await fn(*args)
                except BaseException as exc:  # handed to the waiting coroutine, Cancelled included
                    error = exc
            with contextlib.suppress(RuntimeError):  # the asyncio loop is gone
                loop.call_soon_threadsafe(settle, value, error)

        token.run_sync_soon(nursery.start_soon, run)
        return await _to_end(ended, on_cancel=lambda: token.run_sync_soon(scope.cancel))


def _node_id() -> str | None:
    """The Ray node this replica runs on (hex), if Ray says."""
    try:
        import ray

        node: str = ray.get_runtime_context().get_node_id()
    except Exception:
        return None
    return node


async def _to_end(future: asyncio.Future[T], on_cancel: Callable[[], None] | None = None) -> T:
    """`future`'s result; if this task is cancelled first, `on_cancel()` asks the work to stop,
    the wait goes on until it has, and then the cancellation propagates."""
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if on_cancel is not None:
            on_cancel()
        while not future.done():
            try:
                await asyncio.shield(future)
            except asyncio.CancelledError:
                continue  # cancelled again: the work is still stopping
            except BaseException:
                break
        if future.done() and not future.cancelled():
            future.exception()  # retrieved: asyncio would log it as never retrieved
        raise
