"""A key-value store in a folder: one file per key, for artifacts that should not sit in memory."""

from __future__ import annotations

import contextlib
import math
import os
import struct
import time
import urllib.parse
from collections.abc import Callable
from typing import TypeVar

import trio

from ._protocol import StoreError

__all__ = ["FolderStore"]

T = TypeVar("T")

_HEADER = struct.Struct(">d")  # when the value expires (wall-clock seconds; 0.0: never)
_PARTIAL_AGE = 600.0  # seconds after which a partial file is a write that will never end


class FolderStore:
    """Bytes under text keys, as files in `path` (created if absent), each with a TTL.

    What artifacts need of a store (`get`, `set`, `delete`, `delete_prefix`, `keys`), not the
    counters and buckets of the resilience policies. A key is the file's name (percent-escaped);
    the file holds its expiry (wall-clock seconds, so it means the same after a restart) then the
    value, and is written to a temporary name and renamed, so a reader never sees half of it.
    Every step runs in a worker thread: the trio loop never waits on the disk.

    Expired files are removed by a sweep when the store is first used and then at most every
    `sweep_every` seconds as it is written, not only when read: files of a run that ended (a
    restart, a crash) do not stay for good, nor do the partial files of a write a crash cut.
    TTLs run on `clock` (the wall clock: a file's expiry means the same after a restart).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sweep_every: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = os.fspath(path)
        self.sweep_every = sweep_every
        self._clock = clock
        self._limiter = trio.CapacityLimiter(2)
        self._made = False
        self._next_sweep = -math.inf
        self.swept = 0
        """Files the sweeps removed (expired, or partial files of a write that never ended)."""

    def _file(self, key: str) -> str:
        return os.path.join(self.path, urllib.parse.quote(key, safe=""))

    async def _run(self, job: Callable[[], T]) -> T:
        def work() -> T:
            try:
                if not self._made:
                    os.makedirs(self.path, exist_ok=True)
                    self._made = True
                if self._clock() >= self._next_sweep:
                    self._next_sweep = self._clock() + self.sweep_every
                    self._sweep()
                return job()
            except OSError as exc:
                raise StoreError(f"folder store {self.path!r}: {exc}") from exc

        return await trio.to_thread.run_sync(work, limiter=self._limiter)

    def _sweep(self) -> None:
        """Remove the files whose TTL passed, and partial files older than `_PARTIAL_AGE`."""
        now = self._clock()
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return
        for name in names:
            file = os.path.join(self.path, name)
            try:
                if name.endswith(".partial"):
                    if os.stat(file).st_mtime < time.time() - _PARTIAL_AGE:
                        os.unlink(file)
                        self.swept += 1
                    continue
                with open(file, "rb") as f:
                    (expires,) = _HEADER.unpack(f.read(_HEADER.size))
                if expires and expires <= now:
                    os.unlink(file)
                    self.swept += 1
            except (FileNotFoundError, struct.error):
                continue

    def _read(self, key: str) -> bytes | None:
        try:
            with open(self._file(key), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        (expires,) = _HEADER.unpack_from(data)
        if expires and expires <= self._clock():
            _unlink(self._file(key))
            return None
        return data[_HEADER.size :]

    async def get(self, key: str) -> bytes | None:
        return await self._run(lambda: self._read(key))

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        def job() -> None:
            name = self._file(key)
            partial = f"{name}.{os.getpid()}.{id(value):x}.partial"
            with open(partial, "wb") as f:
                f.write(_HEADER.pack(0.0 if ttl is None else self._clock() + ttl))
                f.write(value)
            os.replace(partial, name)

        await self._run(job)

    async def delete(self, key: str) -> bool:
        def job() -> bool:
            live = self._read(key) is not None
            _unlink(self._file(key))
            return live

        return await self._run(job)

    def _names(self, prefix: str) -> list[str]:
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        keys = (urllib.parse.unquote(n) for n in names if not n.endswith(".partial"))
        return [k for k in keys if k.startswith(prefix)]

    async def delete_prefix(self, prefix: str) -> int:
        def job() -> int:
            found = self._names(prefix)
            for key in found:
                _unlink(self._file(key))
            return len(found)

        return await self._run(job)

    async def keys(self, prefix: str) -> list[str]:
        def job() -> list[str]:
            now = self._clock()
            live: list[str] = []
            for key in self._names(prefix):
                try:
                    with open(self._file(key), "rb") as f:
                        (expires,) = _HEADER.unpack(f.read(_HEADER.size))
                except (FileNotFoundError, struct.error):
                    continue
                if not expires or expires > now:
                    live.append(key)
            return live

        return await self._run(job)

    async def aclose(self) -> None:
        pass


def _unlink(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name)
