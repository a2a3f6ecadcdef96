"""Artifacts: results too large to send a model, kept whole, content-addressed, per principal.

An artifact is a text (kept as UTF-8) or bytes, under a handle made from its content (`art_` and
24 hex digits of its SHA-256) in the scope of one principal: the same content kept for two
principals is two artifacts, and a principal's lookup never finds another's (nor learns that it
exists). It lives `ttl` seconds from when it was first kept; together they hold at most
`max_bytes`. Room is made in the principal that holds the most bytes (the one being kept counted
as its principal's), its oldest first: a principal's results evict another's artifacts only when
that one holds more, so a flood evicts its own and each principal is sure of `max_bytes /
principals`. A piece that would leave its principal holding the most with nothing of its own to
drop is refused (its caller cuts it).

The data sits in any store with `get`/`set`/`delete`/`keys` and TTLs: a `MemoryStore` (the
default: this process), a `FolderStore` (files), an `SQLiteStore` or a `RedisStore` (shared by
processes). It is cut in chunks of `chunk` characters (a text) or bytes, one key each, so a page
of a large artifact reads one or two chunks, and keeping one never makes a second copy of it
whole. Its description (`ArtifactInfo`) is written last: an artifact whose description can be
read is whole.

Keeping is a flow (a generator, as the resilience policies' are): it runs in place when nothing
in it has to wait (a small artifact, a MemoryStore), else its driver awaits what it yields (a
worker thread that encodes and hashes a chunk, a store's step). On a `DegradingStore` a keeping's
steps run within its `deadline` (`DegradingStore.within`): a store that hangs or is locked is
answered from memory for that keeping, never waited out.
"""

from __future__ import annotations

import collections
import hashlib
import math
import re
import time
from collections.abc import Callable, Generator
from typing import IO, Any, Final

import msgspec
import re2
import trio

from .._flows import drive, now
from ..exceptions import ArtifactMissing
from ._degrading import DegradingStore
from ._memory import MemoryStore

__all__ = [
    "CHUNK",
    "INLINE",
    "ArtifactInfo",
    "ArtifactMatch",
    "ArtifactStore",
    "compile_pattern",
    "is_handle",
]

CHUNK: Final = 1 << 20
"""Characters of a text, or bytes of binary data, per stored chunk."""

INLINE: Final = 256 << 10
"""A piece at most this long is encoded and hashed in place; a longer one in worker threads."""

_HANDLE = re.compile(r"^art_[0-9a-f]{24}$")
_SAFE_PRINCIPAL = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_PER_THREAD = 1  # chunks encoded and hashed per trip to a worker thread: the loop waits less for the GIL
_GONE_KEPT = 10_000  # handles remembered as expired or dropped (to say so, not just "unknown")
_PATTERN_CHARS = 4096  # the longest pattern `grep` takes
_PATTERN_MEMORY = 8 << 20  # bytes RE2 may use for one compiled pattern


def is_handle(text: str) -> bool:
    """Whether `text` has the form of an artifact handle (`art_` and 24 hex digits)."""
    return bool(_HANDLE.fullmatch(text))


class ArtifactInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What is known of a kept artifact.

    Attributes:
        handle: its handle (`art_...`): what the model reads and passes back.
        size: its bytes as stored (a text's UTF-8).
        chars: a text's characters; None for binary data.
        mime_type: its type (`text/plain`, `application/json`, `image/png`...).
        created: when it was kept (the store's clock: trio's by default).
        expires: when it is dropped.
        chunk: characters (a text) or bytes per stored chunk.
        chunks: how many chunks hold it.
    """

    handle: str
    size: int
    chars: int | None
    mime_type: str
    created: float
    expires: float
    chunk: int = CHUNK
    chunks: int = 1

    @property
    def is_text(self) -> bool:
        return self.chars is not None

    @property
    def length(self) -> int:
        """Its length in the unit of `read`: characters of a text, bytes of binary data."""
        return self.chars if self.chars is not None else self.size

    @property
    def uri(self) -> str:
        """Its URI as an MCP resource (`artifact://art_...`)."""
        return f"artifact://{self.handle}"


class ArtifactMatch(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a text artifact that matched a search: where it starts and what it says."""

    offset: int
    line: int
    text: str


_info_encoder = msgspec.json.Encoder()
_info_decoder = msgspec.json.Decoder(ArtifactInfo)


class ArtifactStore:
    """Artifacts kept in `store` (a new `MemoryStore` if None); see the module.

    Args:
        store: where the data goes (`MemoryStore`, `FolderStore`, `SQLiteStore`, `RedisStore`).
        ttl: seconds an artifact is kept.
        max_bytes: the most all the artifacts this store keeps may hold together.
        chunk: characters (a text) or bytes per stored chunk.
        clock: the clock of `created` / `expires` and of this store's own accounting: trio's
            for a MemoryStore (MockClock moves it), the wall clock for a store that outlives
            the process (its artifacts mean the same after a restart).

    The cap holds under concurrent keeping: a keeping counts its bytes before it writes any
    (room is made for it first; when the keepings under way leave none, it is cut instead), and
    identical results kept at once are one artifact, counted once. A store that outlives the
    process (a folder, SQLite, Redis) is read once, on the first keeping, so the cap counts what
    earlier runs left there too.
    """

    def __init__(
        self,
        store: Any = None,
        *,
        ttl: float = 3600.0,
        max_bytes: int = 256 << 20,
        chunk: int = CHUNK,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if ttl <= 0 or max_bytes < 1 or chunk < 1:
            raise ValueError("an artifact store needs a positive ttl, max_bytes and chunk")
        self.store = store if store is not None else MemoryStore(max_keys=10_000_000)
        self.local = type(self.store) is MemoryStore  # its steps never suspend (a subclass may)
        self.ttl = float(ttl)
        self.max_bytes = max_bytes
        self.chunk = chunk
        self._clock = clock if clock is not None else (trio.current_time if self.local else time.time)
        self._kept: collections.OrderedDict[tuple[str, str], tuple[int, int, float]] = (
            collections.OrderedDict()
        )  # (scope, handle) -> (bytes, chunks, expires): what this store kept, oldest first
        self._by_scope: dict[str, collections.OrderedDict[str, None]] = {}  # scope -> handles, oldest first
        self._held: dict[str, int] = {}  # scope -> bytes kept and being kept for it
        self._gone: collections.OrderedDict[tuple[str, str], str] = collections.OrderedDict()
        self._keeping: dict[tuple[str, str], trio.Event] = {}  # keepings under way, set when done
        self._loading: trio.Event | None = None  # the first keeping reads what the store holds
        self._loaded = self.local  # a MemoryStore of its own holds nothing from before
        self.total = 0
        """Bytes held by the artifacts this store kept (and that have not expired or been dropped),
        and by those being kept now."""

    def __len__(self) -> int:
        return len(self._kept)

    def fits(self, size: int) -> bool:
        """Whether an artifact of `size` bytes can be kept at all (it is not over `max_bytes`)."""
        return size <= self.max_bytes

    # -- keeping ---------------------------------------------------------------------------

    async def keep(
        self, principal: str | None, data: str | bytes, mime_type: str, *, deadline: float = math.inf
    ) -> ArtifactInfo:
        """Keep `data` (a text, or bytes) for `principal`; its description (the same artifact's,
        if it was kept already).

        Raises:
            ValueError: it is over `max_bytes`.
            StoreError: the store failed.
        """
        info: ArtifactInfo = await drive(self.keep_flow(principal, data, mime_type, deadline=deadline))
        return info

    def keep_flow(
        self, principal: str | None, data: str | bytes, mime_type: str, *, deadline: float = math.inf
    ) -> Generator[Any, Any, ArtifactInfo]:
        """The steps of `keep`: yields what has to be awaited (and is sent its value). `deadline`
        (trio time): when the keeping's caller must have its result (see the module)."""
        chunk = self.chunk
        count = max(1, math.ceil(len(data) / chunk))
        hasher = hashlib.sha256()
        pieces: list[bytes] = []
        if len(data) <= INLINE:
            pieces.extend(_encoded(data, 0, count, chunk, hasher))
        else:  # in worker threads (hashlib lets go of the GIL): the loop goes on meanwhile
            for first in range(0, count, _PER_THREAD):
                many = min(_PER_THREAD, count - first)
                pieces.extend((yield trio.to_thread.run_sync(_encoded, data, first, many, chunk, hasher)))

        def piece(i: int) -> Generator[Any, Any, bytes]:
            return pieces[i]
            yield  # a flow: the pieces are at hand

        info = yield from self._keep(
            principal,
            "art_" + hasher.hexdigest()[:24],
            sum(map(len, pieces)),
            count,
            len(data) if isinstance(data, str) else None,
            mime_type,
            piece,
            self._within(deadline),
        )
        return info

    def keep_file_flow(
        self, principal: str | None, file: IO[str], chars: int, mime_type: str, *, deadline: float = math.inf
    ) -> Generator[Any, Any, ArtifactInfo]:
        """`keep_flow` of a text of `chars` characters that is in `file` (a temporary file a
        result too large to hold in memory was written to, a stream's): read in chunks, twice
        (hashed, then written), in worker threads; never whole in memory."""
        chunk = self.chunk
        count = max(1, math.ceil(chars / chunk))
        hasher = hashlib.sha256()
        size = 0
        file.seek(0)
        for first in range(0, count, _PER_THREAD):
            size += yield trio.to_thread.run_sync(
                _hash_file, file, chunk, min(_PER_THREAD, count - first), hasher
            )

        def piece(i: int) -> Generator[Any, Any, bytes]:
            if i == 0:
                file.seek(0)
            read: bytes = yield trio.to_thread.run_sync(_read_file, file, chunk)  # in order, 0 first
            return read

        info = yield from self._keep(
            principal,
            "art_" + hasher.hexdigest()[:24],
            size,
            count,
            chars,
            mime_type,
            piece,
            self._within(deadline),
        )
        return info

    def _within(self, deadline: float) -> Any:
        """The store as one keeping's steps use it: within its deadline on a `DegradingStore`."""
        store = self.store
        return store.within(deadline) if isinstance(store, DegradingStore) else store

    def _keep(
        self,
        principal: str | None,
        handle: str,
        size: int,
        count: int,
        chars: int | None,
        mime_type: str,
        piece: Callable[[int], Generator[Any, Any, bytes]],
        store: Any,
    ) -> Generator[Any, Any, ArtifactInfo]:
        """Keep an artifact whose content is known by its `handle` (content-addressed), `size`
        bytes in `count` chunks; `piece(i)` gives chunk `i` (in order) when it is written; its
        steps go to `store` (this store's, or a keeping's view of it: `_within`)."""
        if size > self.max_bytes:
            raise ValueError(f"an artifact of {size} bytes is over the store's limit of {self.max_bytes}")
        scope = _scope(principal)
        meta_key = _meta_key(scope, handle)
        key = (scope, handle)
        if not self._loaded:
            yield from self._load(store)
        while (under_way := self._keeping.get(key)) is not None:  # the same, being kept: its result
            yield under_way.wait()
        done = self._keeping[key] = trio.Event()  # before anything is awaited: one keeping a key
        kept = counted = False
        try:
            known = yield from self._step(store.get(meta_key))
            if known is not None:  # kept already (content-addressed): the same artifact
                found: ArtifactInfo = _info_decoder.decode(known)
                kept = True
                return found
            self.total += size  # counted before any write: concurrent keepings see it
            self._hold(scope, size)
            counted = True
            now = self._clock()
            yield from self._make_room(now, store, scope)
            if self.total > self.max_bytes:
                raise ValueError(
                    f"no room for an artifact of {size} bytes: the others' artifacts and the ones being "
                    f"kept now hold the rest of the store's {self.max_bytes} (this principal's share)"
                )
            ttl = self.ttl
            for i in range(count):
                data = yield from piece(i)
                yield from self._step(store.set(_data_key(scope, handle, i), data, ttl))
            info = ArtifactInfo(
                handle=handle,
                size=size,
                chars=chars,
                mime_type=mime_type,
                created=now,
                expires=now + ttl,
                chunk=self.chunk,
                chunks=count,
            )
            yield from self._step(store.set(meta_key, _info_encoder.encode(info), ttl))
            self._add(key, (size, count, now + ttl))
            self._gone.pop(key, None)
            kept = True
            return info
        finally:
            if counted and not kept:  # refused, failed or stopped: its bytes are not held (chunks expire)
                self.total -= size
                self._hold(scope, -size)
            del self._keeping[key]
            done.set()

    def _load(self, store: Any) -> Generator[Any, Any, None]:
        """Count what the store holds from before this process (once; the first keeping waits)."""
        loading = self._loading
        if loading is not None:
            yield loading.wait()
            return
        loading = self._loading = trio.Event()
        try:
            found: list[tuple[str, ArtifactInfo]] = []
            for meta_key in (yield from self._step(store.keys("artifact:"))):
                data = yield from self._step(store.get(meta_key))
                if data is not None:
                    try:
                        found.append((meta_key.split(":", 2)[1], _info_decoder.decode(data)))
                    except msgspec.DecodeError:  # not ours, or cut short: not counted
                        continue
            found.sort(key=lambda item: item[1].created)
            kept = self._kept
            for scope, info in reversed(found):  # newest first: each goes before the ones added
                key = (scope, info.handle)
                if key not in kept:
                    self._add(key, (info.size, info.chunks, info.expires), first=True)
                    self.total += info.size
                    self._hold(scope, info.size)
            # read from the store itself, not from memory in its stead (it did not answer in
            # time): else the next keeping reads it again
            self._loaded = not getattr(store, "down", False)
        finally:
            self._loading = None if not self._loaded else loading
            loading.set()

    def _add(self, key: tuple[str, str], entry: tuple[int, int, float], first: bool = False) -> None:
        """Count a kept artifact (its bytes are held already: `_hold`); `first`: older than the
        others (what the store held from before this process)."""
        scope, handle = key
        self._kept[key] = entry
        handles = self._by_scope.get(scope)
        if handles is None:
            handles = self._by_scope[scope] = collections.OrderedDict()
        handles[handle] = None
        if first:
            self._kept.move_to_end(key, last=False)
            handles.move_to_end(handle, last=False)

    def _hold(self, scope: str, size: int) -> None:
        held = self._held.get(scope, 0) + size
        if held:
            self._held[scope] = held
        else:
            self._held.pop(scope, None)

    def _make_room(self, now: float, store: Any, scope: str) -> Generator[Any, Any, None]:
        """Drop what expired, then, until `total` (the new one counted, for `scope`) fits under
        `max_bytes`, the oldest of the principal that holds the most (`scope` first on a tie);
        never another's for a `scope` that holds as much as any of them (its piece is refused)."""
        kept = self._kept
        for key in [k for k, (_, _, expires) in kept.items() if expires <= now]:
            yield from self._drop(key, "expired", store)
        held, by_scope = self._held, self._by_scope
        while by_scope and self.total > self.max_bytes:
            # a scan of the principals that have artifacts kept: few, each artifact being large
            victim = scope if scope in by_scope else None
            for other in by_scope:
                if victim is None or held[other] > held[victim]:
                    victim = other
            assert victim is not None
            if victim != scope and held.get(scope, 0) >= held[victim]:  # it holds the most, none kept
                return
            yield from self._drop((victim, next(iter(by_scope[victim]))), "dropped", store)

    def _drop(self, key: tuple[str, str], why: str, store: Any) -> Generator[Any, Any, None]:
        entry = self._kept.pop(key, None)
        if entry is None:  # another keeping dropped it meanwhile
            return
        size, count, _ = entry
        scope, handle = key
        handles = self._by_scope[scope]
        del handles[handle]
        if not handles:
            del self._by_scope[scope]
        self.total -= size
        self._hold(scope, -size)
        self._remember(key, why)
        yield from self._step(store.delete(_meta_key(scope, handle)))
        for i in range(count):
            yield from self._step(store.delete(_data_key(scope, handle, i)))

    def _remember(self, key: tuple[str, str], why: str) -> None:
        gone = self._gone
        gone[key] = why
        gone.move_to_end(key)
        while len(gone) > _GONE_KEPT:
            gone.popitem(last=False)

    def _step(self, coro: Any) -> Generator[Any, Any, Any]:
        if self.local:
            return now(coro)
        return (yield coro)

    # -- reading ---------------------------------------------------------------------------

    async def info(self, principal: str | None, handle: str) -> ArtifactInfo:
        """The description of `principal`'s artifact `handle`.

        Raises:
            ArtifactMissing: no such artifact for this principal (never made for it, another's,
                expired or dropped); the message says which, where it can tell.
        """
        if not isinstance(handle, str) or not is_handle(handle):
            raise ArtifactMissing(
                f"{handle!r} is not an artifact handle (they look like art_ and 24 hex digits)"
            )
        scope = _scope(principal)
        data = await self.store.get(_meta_key(scope, handle))
        if data is None:
            raise ArtifactMissing(self._why_missing(scope, handle))
        info: ArtifactInfo = _info_decoder.decode(data)
        return info

    def _why_missing(self, scope: str, handle: str) -> str:
        key = (scope, handle)
        why = self._gone.get(key)
        kept = self._kept.get(key)
        if kept is not None and kept[2] <= self._clock():
            why = "expired"
        if why == "expired":
            return (
                f"artifact {handle} has expired (artifacts are kept {self.ttl:g} s); call the tool "
                "that made it again"
            )
        if why == "dropped":
            return (
                f"artifact {handle} was dropped to make room for newer ones (artifacts hold at most "
                f"{self.max_bytes} bytes together); call the tool that made it again"
            )
        return (
            f"no artifact {handle} is kept for you: it was not made for the principal of this call, "
            "or it has expired"
        )

    async def read(
        self, principal: str | None, handle: str, offset: int = 0, length: int | None = None
    ) -> str | bytes:
        """`length` characters of a text artifact (bytes of a binary one) from `offset` (all the
        rest if None); fewer at its end.

        Raises:
            ArtifactMissing: see `info`.
            ValueError: `offset` is negative or past the end, or `length` is negative.
        """
        info = await self.info(principal, handle)
        total = info.length
        if offset < 0 or offset > total:
            raise ValueError(f"offset {offset} is outside artifact {handle} (0 to {total})")
        if length is not None and length < 0:
            raise ValueError(f"length must not be negative, got {length}")
        end = total if length is None else min(total, offset + length)
        if end <= offset:
            return "" if info.is_text else b""
        scope = _scope(principal)
        chunk = info.chunk
        first, last = offset // chunk, (end - 1) // chunk
        start = offset - first * chunk
        pieces: list[Any] = []
        for i in range(first, last + 1):
            piece = await self.store.get(_data_key(scope, handle, i))
            if piece is None:  # expired between the description and this chunk
                raise ArtifactMissing(self._why_missing(scope, handle))
            # each chunk cut to what is read (and a text's decoded) as it comes: the whole is
            # joined once, never held twice beside its chunks
            lo = start if i == first else 0
            hi = end - i * chunk if i == last else None
            if info.is_text:
                text = piece.decode()
                pieces.append(text[lo:hi] if lo or hi is not None else text)
            else:
                pieces.append(piece[lo:hi] if lo or hi is not None else piece)
            del piece
        if len(pieces) == 1:
            return pieces[0]  # type: ignore[no-any-return]
        return "".join(pieces) if info.is_text else b"".join(pieces)

    async def grep(
        self, principal: str | None, handle: str, pattern: str, *, max_matches: int = 50, max_line: int = 200
    ) -> list[ArtifactMatch]:
        """The lines of a text artifact in which `pattern` (an RE2 regular expression, searched in
        time linear in the text: see `compile_pattern`) is found, first to last, at most
        `max_matches`; each line cut to `max_line` characters.

        Raises:
            ArtifactMissing: see `info`.
            ValueError: a binary artifact, or a pattern that does not compile.
        """
        info = await self.info(principal, handle)
        if not info.is_text:
            raise ValueError(f"artifact {handle} is binary ({info.mime_type}); only a text can be searched")
        regex = compile_pattern(pattern)
        scope = _scope(principal)
        scan = _Scan(regex, max_matches, max_line)
        for i in range(info.chunks):
            piece = await self.store.get(_data_key(scope, handle, i))
            if piece is None:
                raise ArtifactMissing(self._why_missing(scope, handle))
            last = i == info.chunks - 1
            if len(piece) <= INLINE:
                scan.feed(piece, last)
            else:
                await trio.to_thread.run_sync(scan.feed, piece, last, abandon_on_cancel=True)
            if scan.full:
                break
        return scan.found

    async def listing(self, principal: str | None) -> list[ArtifactInfo]:
        """The artifacts kept for `principal`, oldest first."""
        scope = _scope(principal)
        prefix = _meta_key(scope, "")
        found: list[ArtifactInfo] = []
        for key in await self.store.keys(prefix):
            data = await self.store.get(key)
            if data is not None:
                found.append(_info_decoder.decode(data))
        found.sort(key=lambda info: info.created)
        return found

    async def forget(self, principal: str | None, handle: str) -> bool:
        """Drop `principal`'s artifact `handle` now; False if there was none."""
        key = (_scope(principal), handle)
        if key in self._kept:
            await drive(self._drop(key, "dropped", self.store))
            return True
        return False

    def statistics(self) -> dict[str, int]:
        """{"artifacts": how many this store keeps, "bytes": what they hold}."""
        return {"artifacts": len(self._kept), "bytes": self.total}


def compile_pattern(pattern: str) -> Any:
    """`pattern` compiled by RE2 (google-re2), whose searches take time linear in the text: a
    model's pattern is not trusted code, and Python's backtracking `re` took seconds to hours on
    one short line for `(.*){5}!`, with the whole event loop frozen meanwhile. RE2 has no
    backreferences nor lookaround; its compiled form is capped at `_PATTERN_MEMORY` bytes.

    Raises:
        ValueError: the pattern is not one RE2 takes (or is too large); the message says why.
    """
    if len(pattern) > _PATTERN_CHARS:
        raise ValueError(f"the pattern is {len(pattern):,} characters; at most {_PATTERN_CHARS:,}")
    options = re2.Options()
    options.max_mem = _PATTERN_MEMORY
    options.log_errors = False
    options.never_capture = True
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(
            f"the pattern {pattern!r} is not a regular expression RE2 takes ({reason}; RE2 has no "
            "backreferences nor lookaround)"
        ) from None


class _Scan:
    """A search over a text's chunks: a line cut by a chunk's end is completed by the next one."""

    def __init__(self, regex: Any, max_matches: int, max_line: int) -> None:
        self.regex = regex
        self.max_matches = max_matches
        self.max_line = max_line
        self.found: list[ArtifactMatch] = []
        self.carry = ""
        self.offset = 0  # characters before `carry`
        self.line = 1  # the line `carry` starts

    @property
    def full(self) -> bool:
        return len(self.found) >= self.max_matches

    def feed(self, piece: bytes, last: bool) -> None:
        text = self.carry + piece.decode()
        lines = text.split("\n")
        self.carry = "" if last else lines.pop()
        search = self.regex.search
        offset, line = self.offset, self.line
        for content in lines:
            if search(content) is not None:
                shown = content if len(content) <= self.max_line else content[: self.max_line] + "..."
                self.found.append(ArtifactMatch(offset=offset, line=line, text=shown))
                if self.full:
                    return
            offset += len(content) + 1
            line += 1
        self.offset, self.line = offset, line


def _encoded(data: str | bytes, first: int, many: int, chunk: int, hasher: Any) -> list[bytes]:
    """Chunks `first` to `first + many` of `data`, as bytes, each added to `hasher` in turn."""
    pieces: list[bytes] = []
    for i in range(first, first + many):
        piece = data[i * chunk : (i + 1) * chunk]
        encoded = piece.encode() if isinstance(piece, str) else bytes(piece)
        hasher.update(encoded)
        pieces.append(encoded)
    return pieces


def _hash_file(file: IO[str], chunk: int, many: int, hasher: Any) -> int:
    """Read `many` chunks of `chunk` characters from `file`, each encoded and added to `hasher`;
    the bytes they came to."""
    size = 0
    for _ in range(many):
        encoded = file.read(chunk).encode()
        hasher.update(encoded)
        size += len(encoded)
    return size


def _read_file(file: IO[str], chunk: int) -> bytes:
    """The next chunk of `chunk` characters of `file`, encoded."""
    return file.read(chunk).encode()


def _scope(principal: str | None) -> str:
    """A principal as a part of a key: itself when that is safe in every store, else a digest."""
    if principal is None:
        return "-"
    if _SAFE_PRINCIPAL.fullmatch(principal):
        return "p" + principal
    return "h" + hashlib.sha256(principal.encode()).hexdigest()[:40]


def _meta_key(scope: str, handle: str) -> str:
    return f"artifact:{scope}:{handle}"


def _data_key(scope: str, handle: str, index: int) -> str:
    return f"artifact-data:{scope}:{handle}:{index}"
