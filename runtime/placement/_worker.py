"""The entry point of a Subprocess worker: `python -m runtime.placement._worker`.

The runtime speaks to it over its stdin and stdout in length-prefixed MessagePack frames
(`_protocol`). Before anything else the worker moves those two pipes aside: the tool's
`print()` then writes to stderr, which the runtime forwards to its log (tagged with the
tool and the pid), and nothing the tool does can corrupt the protocol. The worker dies with
the runtime (a watch on its parent pid, and the end of its stdin).
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ._frames import FdFrames, FrameReader
from ._host import ToolHost, box
from ._pieces import reply_bodies
from ._protocol import Load, Ready, Request, Stop, decode_to_worker, encode

__all__ = ["Spin", "main"]


def main() -> None:
    protocol_in = os.dup(0)
    protocol_out = os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # fd 1 is stderr from now on: print() goes to the runtime's log
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    _die_with_parent()
    trio.run(_serve, protocol_in, protocol_out)


def _die_with_parent() -> None:
    """Exit when the runtime's process is gone, even while a tool blocks the main thread.

    Not PR_SET_PDEATHSIG: that follows the parent *thread*, and trio starts processes from
    its worker threads, which exit after a few idle seconds. A closed stdin ends the worker
    too, but only between calls.
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(70)

    threading.Thread(target=watch, name="tool-runtime-lifeline", daemon=True).start()


def _cap_address_space(megabytes: int) -> None:
    import resource

    limit = megabytes << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


class Spin:
    """Polls the request pipe a short while after a reply, before the worker sleeps in its read.

    A process the pipe must wake costs tens of microseconds a call (its core is woken from
    idle: on a virtual machine, through the hypervisor), more than the rest of the call; one
    that is still polling when the next request comes sees it at once. A sequential caller's
    next request comes a few microseconds after its reply, so a short window catches it. The
    worker yields its core between polls (`sched_yield`), so that on a busy machine the caller
    and other workers run first: the window is spent only on a core nobody else wants. And it
    polls only while requests keep coming within the window: once one came later (calls are
    sparse), it sleeps at once after the next reply, and polls again after a request that came
    soon after the last reply.
    """

    __slots__ = ("_clock", "_keen", "_poll", "_since", "_window")

    def __init__(self, fd: int, spin_us: int, clock: Callable[[], float] = time.perf_counter) -> None:
        poller = select.poll()
        poller.register(fd, select.POLLIN)  # also ready at the pipe's end (POLLHUP)
        self._poll = poller.poll
        self._window = spin_us / 1e6
        self._clock = clock
        self._keen = True  # the last request came within the window: poll for the next
        self._since: float | None = None  # when the worker began to wait for the next request

    def _start(self) -> float | None:
        """Mark the start of a wait; the end of its window if it is to poll at all."""
        now = self._since = self._clock()
        return now + self._window if self._keen else None

    def pending(self, end: float) -> bool:
        """True while no request has come and the window (until `end`) is still open."""
        return not self._poll(0) and self._clock() < end

    def came(self) -> None:
        """A request has been read: poll after this call's reply only if it came in the window
        (one that was in the reader's buffer already, with no wait, says nothing of that)."""
        since, self._since = self._since, None
        if since is not None:
            self._keen = self._clock() - since < self._window

    def wait(self) -> None:
        """Return once a request is there or the window has passed (sync tools: nothing else runs)."""
        end = self._start()
        if end is not None:
            while self.pending(end):
                os.sched_yield()

    async def wait_async(self) -> None:
        """`wait` for a worker with an async tool: its own tasks run between the polls too."""
        end = self._start()
        if end is not None:
            while self.pending(end):
                os.sched_yield()
                await trio.lowlevel.checkpoint()


async def _send(send: Callable[[bytes], Awaitable[None]], body: bytes) -> None:
    await send(len(body).to_bytes(4, "big") + body)


async def _serve(protocol_in: int, protocol_out: int) -> None:
    # For a sync tool the worker has nothing else to do while it waits for the next call: its
    # pipes are read and written with plain blocking calls (they are blocking here), and a
    # blocking read costs a third of a trio wake-up (about 12 us against 48 us a round trip).
    # An async tool gets trio's streams, so its background tasks run between calls.
    frames = FdFrames(protocol_in, protocol_out)
    reader: Any = frames
    out: Callable[[bytes], Awaitable[None]] = frames.write
    first = await reader.read()
    if first is None:
        return
    load = decode_to_worker(first)
    if not isinstance(load, Load):
        raise SystemExit(f"expected a Load message first, not {type(load).__name__}")
    sys.path[:0] = [p for p in load.sys_path if p not in sys.path]
    try:
        host = ToolHost(load, trio.current_time)
        await host.setup()
    except Exception as exc:
        await _send(out, encode(box(exc)))
        return
    if host.is_async:
        reader = FrameReader(trio.lowlevel.FdStream(protocol_in))
        out = trio.lowlevel.FdStream(protocol_out).send_all

        async def send(body: bytes) -> None:  # a tool's progress and logs, before its reply
            await _send(out, body)

        host.send = send
    try:
        if load.max_memory_mb is not None:
            _cap_address_space(load.max_memory_mb)
        await _send(out, encode(Ready(pid=os.getpid())))
        spin = Spin(protocol_in, load.spin_us) if load.spin_us else None
        while True:
            if spin is not None and not reader.buffered:  # (else the next request may be there)
                if host.is_async:
                    await spin.wait_async()
                else:
                    spin.wait()
            data = await reader.read()
            if data is None:  # the runtime is gone
                break
            if spin is not None:
                spin.came()
            message = decode_to_worker(data)
            if isinstance(message, Stop):
                break
            if not isinstance(message, Request):
                raise SystemExit(f"unexpected message {type(message).__name__}")
            reply = await host.serve(message) if host.is_async else host.serve_sync(message)
            for body in reply_bodies(reply):  # one, or a large result's pieces then its Done
                await _send(out, body)
    finally:
        with trio.CancelScope(shield=True):
            try:
                await host.teardown()
            except Exception as exc:
                print(f"teardown of tool {load.name!r} failed: {exc!r}", file=sys.stderr)


if __name__ == "__main__":
    main()
