"""A store in one SQLite file: survives a restart; shared by the processes of one machine."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

import trio

from ._protocol import StoreError

__all__ = ["SQLiteStore"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    expires REAL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS buckets (
    key TEXT PRIMARY KEY,
    tokens REAL NOT NULL,
    at REAL NOT NULL,
    expires REAL NOT NULL
) WITHOUT ROWID;
"""


class SQLiteStore:
    """State in the SQLite file at `path` (created if absent), in WAL mode.

    Each step is one transaction (`BEGIN IMMEDIATE`, so two processes' `incr`/`take`/`add`
    serialise on the file's write lock) run in a worker thread: the trio loop never waits on
    the disk. TTLs are wall-clock seconds (they must mean the same after a restart). Expired
    rows are skipped on read and swept now and then.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 5.0) -> None:
        self.path = os.fspath(path)
        self.timeout = timeout
        self._db: sqlite3.Connection | None = None
        self._limiter = trio.CapacityLimiter(1)
        self._writes = 0

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        return db

    async def _run(self, job: Callable[[sqlite3.Connection, float], T]) -> T:
        def work() -> T:
            try:
                if self._db is None:
                    self._db = self._connect()
                db = self._db
                db.execute("BEGIN IMMEDIATE")
                try:
                    value = job(db, time.time())
                    self._writes += 1
                    if self._writes % 1000 == 0:
                        now = time.time()
                        db.execute("DELETE FROM kv WHERE expires IS NOT NULL AND expires <= ?", (now,))
                        db.execute("DELETE FROM buckets WHERE expires <= ?", (now,))
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
                return value
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite store {self.path!r}: {exc}") from exc

        # A step whose caller stops waiting (its call's deadline: `DegradingStore.within`) leaves
        # its thread to end on its own: the file may be locked by another connection for the
        # whole busy `timeout`, which no call has to wait out. The limiter stays held until the
        # thread ends, so the connection is never used by two threads at once.
        return await trio.to_thread.run_sync(work, limiter=self._limiter, abandon_on_cancel=True)

    @staticmethod
    def _value(db: sqlite3.Connection, key: str, now: float) -> bytes | None:
        row = db.execute(
            "SELECT value FROM kv WHERE key = ? AND (expires IS NULL OR expires > ?)", (key, now)
        ).fetchone()
        return None if row is None else bytes(row[0])

    async def get(self, key: str) -> bytes | None:
        return await self._run(lambda db, now: self._value(db, key, now))

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        def job(db: sqlite3.Connection, now: float) -> None:
            db.execute(
                "INSERT OR REPLACE INTO kv (key, value, expires) VALUES (?, ?, ?)",
                (key, bytes(value), None if ttl is None else now + ttl),
            )

        await self._run(job)

    async def add(self, key: str, value: bytes, ttl: float | None = None) -> bool:
        def job(db: sqlite3.Connection, now: float) -> bool:
            if self._value(db, key, now) is not None:
                return False
            db.execute(
                "INSERT OR REPLACE INTO kv (key, value, expires) VALUES (?, ?, ?)",
                (key, bytes(value), None if ttl is None else now + ttl),
            )
            return True

        return await self._run(job)

    async def delete(self, key: str) -> bool:
        def job(db: sqlite3.Connection, now: float) -> bool:
            live = self._value(db, key, now) is not None
            db.execute("DELETE FROM kv WHERE key = ?", (key,))
            return live

        return await self._run(job)

    # Prefixes are compared as bytes: SQLite's text functions stop at a NUL, and the policies'
    # keys hold NULs between their parts ("cache:TOOL\x00PRINCIPAL\x00..."), so a text `substr`
    # matched nothing and a tool's cache was never invalidated.
    _PREFIX = "substr(CAST(key AS BLOB), 1, ?) = ?"

    async def delete_prefix(self, prefix: str) -> int:
        def job(db: sqlite3.Connection, now: float) -> int:
            found = self._prefixed(db, prefix, now)
            raw = prefix.encode()
            db.execute(f"DELETE FROM kv WHERE {self._PREFIX}", (len(raw), raw))
            return len(found)

        return await self._run(job)

    @classmethod
    def _prefixed(cls, db: sqlite3.Connection, prefix: str, now: float) -> list[str]:
        raw = prefix.encode()
        rows = db.execute(
            f"SELECT key FROM kv WHERE {cls._PREFIX} AND (expires IS NULL OR expires > ?)",
            (len(raw), raw, now),
        ).fetchall()
        return [r[0] for r in rows]

    async def keys(self, prefix: str) -> list[str]:
        return await self._run(lambda db, now: self._prefixed(db, prefix, now))

    async def incr(self, key: str, amount: int = 1, ttl: float | None = None) -> int:
        def job(db: sqlite3.Connection, now: float) -> int:
            row = db.execute(
                "SELECT value, expires FROM kv WHERE key = ? AND (expires IS NULL OR expires > ?)", (key, now)
            ).fetchone()
            if row is None:
                value, expires = amount, None if ttl is None else now + ttl
            else:
                try:
                    value = int(bytes(row[0])) + amount
                except ValueError:
                    raise ValueError(f"key {key!r} does not hold an integer") from None
                expires = row[1]
            db.execute(
                "INSERT OR REPLACE INTO kv (key, value, expires) VALUES (?, ?, ?)",
                (key, str(value).encode(), expires),
            )
            return value

        return await self._run(job)

    async def take(self, key: str, rate: float, burst: float, cost: float = 1.0) -> float:
        def job(db: sqlite3.Connection, now: float) -> float:
            row = db.execute(
                "SELECT tokens, at FROM buckets WHERE key = ? AND expires > ?", (key, now)
            ).fetchone()
            tokens = burst if row is None else min(burst, row[0] + max(0.0, now - row[1]) * rate)
            wait = 0.0
            if tokens >= cost:
                tokens -= cost
            else:
                wait = (cost - tokens) / rate if rate > 0 else float("inf")
            expires = now + (burst / rate + 1.0 if rate > 0 else 86400.0)
            db.execute(
                "INSERT OR REPLACE INTO buckets (key, tokens, at, expires) VALUES (?, ?, ?, ?)",
                (key, tokens, now, expires),
            )
            return wait

        return await self._run(job)

    async def swap(self, key: str, old: bytes | None, new: bytes | None, ttl: float | None = None) -> bool:
        def job(db: sqlite3.Connection, now: float) -> bool:
            if self._value(db, key, now) != (None if old is None else bytes(old)):
                return False
            if new is None:
                db.execute("DELETE FROM kv WHERE key = ?", (key,))
            else:
                db.execute(
                    "INSERT OR REPLACE INTO kv (key, value, expires) VALUES (?, ?, ?)",
                    (key, bytes(new), None if ttl is None else now + ttl),
                )
            return True

        return await self._run(job)

    async def aclose(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await trio.to_thread.run_sync(db.close, limiter=self._limiter)
