"""Driving tests/detached_server.py processes: start one, ask it things, kill it with SIGKILL, and
count what its tools did (their log). Shared by tests/test_detached_durable.py and the crash
harness tests/test_detached_crash.py."""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).parent
SERVER = HERE / "detached_server.py"
READ_TIMEOUT = 60.0  # seconds a server has to answer
_numbers = itertools.count(1)


class Server:
    """One server process: requests go to its stdin, answers (by request number) come back."""

    def __init__(self, process: trio.Process, stderr: Path) -> None:
        self.process = process
        self.stderr = stderr
        self.pid = process.pid
        self._buffer = bytearray()
        self._answers: dict[int, dict[str, Any]] = {}

    @classmethod
    async def start(
        cls, store: str, log: Path, *, node: str, prefix: str = "runtime:", lease: float = 15.0
    ) -> Server:
        """Start a server and wait until its runtime is open (reap it with `stop` or `kill`)."""
        stderr = log.with_name(f"{log.stem}.{next(_numbers)}.stderr")
        command = [
            sys.executable, str(SERVER), "--store", store, "--log", str(log),
            "--node", node, "--prefix", prefix, "--lease", str(lease),
        ]  # fmt: skip
        path = [str(HERE.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        with stderr.open("wb") as err:
            process = await trio.lowlevel.open_process(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env
            )
        server = cls(process, stderr)
        try:
            ready = await server._line()
        except BaseException:
            await server.kill()
            raise
        assert "ready" in ready, ready
        return server

    async def _line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        with trio.move_on_after(READ_TIMEOUT):
            while b"\n" not in self._buffer:
                data = await self.process.stdout.receive_some()
                if not data:
                    break
                self._buffer += data
        if b"\n" not in self._buffer:
            raise ServerGone(
                f"server {self.pid} said nothing more; its stderr:\n{self.stderr.read_text()[-4000:]}"
            )
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer[:] = rest
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def send(self, **request: Any) -> int:
        n = next(_numbers)
        assert self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps({"n": n, **request}).encode() + b"\n")
        return n

    async def answer(self, n: int) -> dict[str, Any]:
        while n not in self._answers:
            line = await self._line()
            self._answers[line.pop("n")] = line
        return self._answers.pop(n)

    async def ask(self, **request: Any) -> dict[str, Any]:
        return await self.answer(await self.send(**request))

    async def kill(self) -> None:
        """SIGKILL it (if it did not die already) and reap it."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        await self._reap()

    async def _reap(self) -> None:
        """Wait for it and close our ends of its pipes."""
        with trio.CancelScope(shield=True):
            await self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    await trio.aclose_forcefully(stream)

    async def dead(self) -> bool:
        """Wait for it to end (a tool killed its own process)."""
        with trio.move_on_after(READ_TIMEOUT):
            await self._reap()
            return True
        return False

    async def stop(self) -> None:
        """Close its stdin (it closes its runtime and ends) and reap it."""
        assert self.process.stdin is not None
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self.process.stdin.aclose()
        with trio.move_on_after(READ_TIMEOUT):
            await self.process.wait()
        await self.kill()  # reaped (and its pipes closed), killed first if it did not end


class ServerGone(AssertionError):
    """The server ended (killed) before it answered."""


def side_effects(log: Path) -> collections.Counter[tuple[str, str]]:
    """How often each (what, key) was written by the servers' tools: ("begin", key), ("effect", key)."""
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    if log.exists():
        for line in log.read_text().splitlines():
            what, key, _pid = line.split(" ")
            counts[(what, key)] += 1
    return counts
