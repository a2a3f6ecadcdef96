"""A real `redis-server` for the store tests: started on a free loopback port in a temporary
directory, with no persistence, and stopped (and reaped) by the test or fixture that started it.

`make test` installs Debian's `redis-server` where there is none (the Makefile's REDIS_STAMP).
Without one the Redis tests fail with that hint: they are never skipped, nor run on a fake.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["RedisServer", "running_redis"]

START_TIMEOUT = 10.0  # seconds a starting server has to answer PING
STOP_TIMEOUT = 5.0  # seconds a server told to stop (SIGTERM) has before it is killed


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One `redis-server` child process on `port` (picked once, kept across restarts).

    `start()` returns once the server answers PING; `stop()` ends it (SIGTERM, then SIGKILL)
    and waits for it, so no zombie is left; `restart()` is both, on the same port, as an
    outage and its end look to a client. Its data lives in memory only (`--save ''`,
    `--appendonly no`): a restart starts empty.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError(
                "redis-server is not installed: `make test` installs Debian's package "
                "(or: apt-get install redis-server)"
            )
        self.binary = binary
        self.directory = Path(directory)
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log(self) -> str:
        path = self.directory / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> None:
        if self.process is not None:
            raise RuntimeError("this redis-server is running already")
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(self.directory),
                "--logfile", "redis.log",
                "--daemonize", "no",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while not _ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not start:\n{self.log}")
            time.sleep(0.01)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def flush(self) -> None:
        """Forget every key (between tests that share the server)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2.0) as s:
            s.sendall(b"FLUSHALL\r\n")
            if not s.recv(64).startswith(b"+OK"):
                raise RuntimeError("redis-server did not flush")


@contextlib.contextmanager
def running_redis() -> Iterator[RedisServer]:
    """A started server in a fresh temporary directory, stopped and removed on exit."""
    with tempfile.TemporaryDirectory(prefix="redis-test-") as directory:
        server = RedisServer(directory)
        server.start()
        try:
            yield server
        finally:
            server.stop()
