"""A store in Redis, shared by every server process that reaches it (RESP2 over a trio socket)."""

from __future__ import annotations

import re
import select
import urllib.parse
from typing import Any

import trio

from ._protocol import StoreError

__all__ = ["RedisStore"]

_INCR = """
local created = redis.call('EXISTS', KEYS[1]) == 0
local value = redis.call('INCRBY', KEYS[1], ARGV[1])
if created and tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return value
"""

# One token bucket, on the server's clock (processes on other machines agree on it). Time is kept
# as integer microseconds and tokens with 17 digits: `tostring` of an epoch time in seconds keeps
# 14 digits (100 us), and every rounding up became free tokens under contention (+0.3-1%).
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = burst
if b[1] then tokens = math.min(burst, tonumber(b[1]) + math.max(0, now - tonumber(b[2])) * rate / 1000000) end
local wait = 0
if tokens >= cost then tokens = tokens - cost else wait = (cost - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'at', string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst / rate + 1) * 1000))
return string.format('%.17g', wait)
"""

# Compare-and-set: ARGV[1] is "1" when the key must hold ARGV[2] ("0": hold nothing); ARGV[3]
# is "1" to store ARGV[4] (for ARGV[5] ms when > 0), "0" to delete the key.
_SWAP = """
local held = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if held ~= ARGV[2] then return 0 end
elseif held then
  return 0
end
if ARGV[3] == '1' then
  if tonumber(ARGV[5]) > 0 then
    redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
  else
    redis.call('SET', KEYS[1], ARGV[4])
  end
else
  redis.call('DEL', KEYS[1])
end
return 1
"""

_GLOB = re.compile(r"([*?\[\]\\])")
_NOT_INTEGER = re.compile(r"not an integer|WRONGTYPE")


class _ReplyError(Exception):
    """An error reply (`-ERR ...`): the connection is still good."""


class _Connection:
    """One RESP2 connection: send a command, read one reply."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def command(self, *args: bytes | str | int | float) -> Any:
        out = bytearray(b"*%d\r\n" % len(args))
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out += b"$%d\r\n%s\r\n" % (len(data), data)
        await self.stream.send_all(out)
        return await self._reply()

    async def _line(self) -> bytes:
        while True:
            end = self.buffer.find(b"\r\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 2]
                return line
            await self._more()

    async def _more(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            raise StoreError("redis closed the connection")
        self.buffer += data

    async def _reply(self) -> Any:
        line = await self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise _ReplyError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            while len(self.buffer) < size + 2:
                await self._more()
            value = bytes(self.buffer[:size])
            del self.buffer[: size + 2]
            return value
        if kind == b"*":
            count = int(rest)
            if count < 0:
                return None
            return [await self._reply() for _ in range(count)]
        raise StoreError(f"redis sent something that is not RESP2: {line[:40]!r}")

    async def aclose(self) -> None:
        await self.stream.aclose()


class RedisStore:
    """State in the Redis at `url` (`redis://[:password@]host[:port][/db]`), every key under
    `prefix` so one Redis can serve several deployments.

    Connections are pooled (at most `max_connections`); each step has `timeout` seconds, after
    which it raises `StoreError` (the runtime's `DegradingStore` then answers from memory).
    Counters and token buckets are Lua scripts: atomic across processes, on the server's clock.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "runtime:",
        timeout: float = 1.0,
        max_connections: int = 16,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "redis":
            raise ValueError(f"RedisStore wants a redis:// URL, got {url!r}")
        self.url = url
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 6379
        self.password = urllib.parse.unquote(parsed.password) if parsed.password else None
        self.username = urllib.parse.unquote(parsed.username) if parsed.username else None
        path = parsed.path.strip("/")
        self.db = int(path) if path else 0
        self.prefix = prefix
        self.timeout = timeout
        self._idle: list[_Connection] = []
        self._slots = trio.Semaphore(max_connections)
        self._closed = False

    async def _connect(self) -> _Connection:
        conn = _Connection(await trio.open_tcp_stream(self.host, self.port))
        try:
            if self.password is not None:
                auth = (self.username, self.password) if self.username else (self.password,)
                await conn.command("AUTH", *auth)
            if self.db:
                await conn.command("SELECT", self.db)
        except BaseException:
            await trio.aclose_forcefully(conn.stream)
            raise
        return conn

    def _pooled(self) -> _Connection | None:
        """An idle connection the server has not closed meanwhile. An idle RESP2 connection
        has nothing to read: if it has (EOF, a reset), the server restarted or went away, and
        the connection is dropped here rather than failing the next step (which would have
        made the runtime degrade for a Redis that is back)."""
        idle = self._idle
        while idle:
            conn = idle.pop()
            poll = select.poll()
            poll.register(conn.stream.socket.fileno(), select.POLLIN)
            if not poll.poll(0):
                return conn
            conn.stream.socket.close()
        return None

    async def _do(self, *args: bytes | str | int | float) -> Any:
        if self._closed:
            raise StoreError("the RedisStore is closed")
        conn: _Connection | None = None
        try:
            # the wait for a pooled connection is part of the step's time: with the server hung
            # and every connection taken, a step failed only after its turn came (4 s, not 1)
            with trio.fail_after(self.timeout):
                async with self._slots:
                    conn = self._pooled()
                    try:
                        if conn is None:
                            conn = await self._connect()
                        reply = await conn.command(*args)
                    except _ReplyError:
                        if conn is not None:  # an error reply leaves the connection in step
                            self._idle.append(conn)
                        raise
                    except BaseException:  # the connection's state is unknown: drop it
                        if conn is not None:
                            await trio.aclose_forcefully(conn.stream)
                        raise
                    self._idle.append(conn)
                    return reply
        except _ReplyError as exc:
            raise StoreError(f"redis: {exc}") from exc
        except trio.TooSlowError:
            raise StoreError(f"redis at {self.host}:{self.port} did not answer in {self.timeout}s") from None
        except (OSError, ValueError, trio.BrokenResourceError) as exc:  # a reset: broken
            raise StoreError(f"redis at {self.host}:{self.port}: {exc}") from exc

    def _key(self, key: str) -> str:
        return self.prefix + key

    async def get(self, key: str) -> bytes | None:
        value: bytes | None = await self._do("GET", self._key(key))
        return value

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        if ttl is None:
            await self._do("SET", self._key(key), value)
        else:
            await self._do("SET", self._key(key), value, "PX", max(1, round(ttl * 1000)))

    async def add(self, key: str, value: bytes, ttl: float | None = None) -> bool:
        if ttl is None:
            reply = await self._do("SET", self._key(key), value, "NX")
        else:
            reply = await self._do("SET", self._key(key), value, "PX", max(1, round(ttl * 1000)), "NX")
        return bool(reply == "OK")

    async def delete(self, key: str) -> bool:
        deleted: int = await self._do("DEL", self._key(key))
        return deleted > 0

    async def _scan(self, prefix: str) -> list[str]:
        pattern = _GLOB.sub(r"\\\1", self.prefix + prefix) + "*"
        cursor: bytes = b"0"
        found: list[str] = []
        while True:
            cursor, batch = await self._do("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
            found.extend(k.decode() for k in batch)
            if cursor == b"0":
                return found

    async def delete_prefix(self, prefix: str) -> int:
        found = await self._scan(prefix)
        deleted = 0
        for i in range(0, len(found), 500):
            deleted += await self._do("DEL", *found[i : i + 500])
        return deleted

    async def keys(self, prefix: str) -> list[str]:
        n = len(self.prefix)
        return [k[n:] for k in await self._scan(prefix)]

    async def incr(self, key: str, amount: int = 1, ttl: float | None = None) -> int:
        ms = 0 if ttl is None else max(1, round(ttl * 1000))
        try:
            value: int = await self._do("EVAL", _INCR, 1, self._key(key), amount, ms)
        except StoreError as exc:  # the key holds something else: the caller's mistake, not an outage
            if isinstance(exc.__cause__, _ReplyError) and _NOT_INTEGER.search(str(exc.__cause__)):
                raise ValueError(f"key {key!r} does not hold an integer") from None
            raise
        return value

    async def take(self, key: str, rate: float, burst: float, cost: float = 1.0) -> float:
        if rate <= 0:
            return float("inf")
        wait = await self._do(
            "EVAL", _TAKE, 1, self._key(key), repr(float(rate)), repr(float(burst)), repr(float(cost))
        )
        return float(wait)

    async def swap(self, key: str, old: bytes | None, new: bytes | None, ttl: float | None = None) -> bool:
        ms = 0 if ttl is None else max(1, round(ttl * 1000))
        done = await self._do(
            "EVAL",
            _SWAP,
            1,
            self._key(key),
            "0" if old is None else "1",
            b"" if old is None else old,
            "0" if new is None else "1",
            b"" if new is None else new,
            ms,
        )
        return bool(done)

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await trio.aclose_forcefully(conn.stream)
