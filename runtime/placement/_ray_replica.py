"""One Ray replica of a placed tool: the actor class Ray runs (imported there by module path).

It holds a `ToolHost`, speaks the same messages as a Subprocess worker (msgspec bytes in and
out) and never raises: a tool's exception comes back boxed. Async tools (and every
`setup()` / `teardown()`) run on a trio loop of the replica's own, in one thread, reached
from Ray's method threads with `trio.from_thread.run`; sync tools run in Ray's thread.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from typing import Any

import trio

from ._host import ToolHost, box
from ._pieces import reply_buffer
from ._protocol import Load, Ready, decode_to_worker, encode

__all__ = ["Replica"]


class Replica:
    """A tool in a Ray actor. Ray calls `ready()` once, then `call()` per call, then `stop()`."""

    def __init__(self, load_bytes: bytes) -> None:
        load = decode_to_worker(load_bytes)
        assert isinstance(load, Load)
        sys.path[:0] = [p for p in load.sys_path if p not in sys.path]
        self._token: trio.lowlevel.TrioToken | None = None
        self._done: trio.Event | None = None
        started = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, args=(started,), name="tool-runtime-trio", daemon=True
        )
        self._thread.start()
        started.wait()
        self._ready: bytes
        try:
            self.host = ToolHost(load)
            self._run(self.host.setup)
        except Exception as exc:
            self._ready = encode(box(exc))
        else:
            self._ready = encode(Ready(pid=os.getpid()))

    def _loop(self, started: threading.Event) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._done = trio.Event()
            started.set()
            await self._done.wait()

        trio.run(main)

    def _run(self, fn: Any, *args: Any) -> Any:
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def ready(self) -> bytes:
        """Ready (with the pid), or the exception that `setup()` raised, boxed."""
        return self._ready

    def call(self, request_bytes: bytes) -> bytes | pickle.PickleBuffer:
        request = decode_to_worker(request_bytes)
        host = self.host
        reply = self._run(host.serve, request) if host.is_async else host.serve_sync(request)
        return reply_buffer(reply)  # a large one out of band: no copy on its way to the driver

    def stop(self) -> None:
        """Run `teardown()` and end the replica's trio loop."""
        try:
            self._run(self.host.teardown)
        finally:
            if self._done is not None and self._token is not None:
                self._token.run_sync_soon(self._done.set)
