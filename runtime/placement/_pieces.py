"""Large results in pieces: built where the tool ran, put together here without stalling the loop.

A result of hundreds of MB decoded as one MessagePack message holds the trio loop for the whole
decode (about 0.75 ms per MB here, in one C call), and a thread does not help: the decoder keeps
the GIL. So a worker (or a Ray replica) sends a large text or value as a series of `Piece`
messages of about `PIECE_BYTES` each, then the `Done` naming what they were; the runtime puts
each piece in place and lets the loop run between pieces.

    text   -> Piece(text), Piece(chars, <= TEXT_CHUNK characters) ..., Piece(end)
    list   -> Piece(list), Piece(items, [elements]) / a large element in pieces ..., Piece(end)
    dict   -> Piece(map), Piece(entries, {k: v}) / Piece(key, k) + a large value ..., Piece(end)
    other  -> Piece(leaf, value)

A text grows in place (`text += chars`: CPython appends to a string that nothing else holds
without copying it), so putting one together costs about what its bytes cost, in steps of one
piece. One exception: a text whose first character outside Latin-1 (or the BMP) comes late is
copied once when it widens, in one step.

A text result's value is its text: it travels once (`Done.value_is_content`), at any size.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import pickle
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import msgspec
import trio

from ._protocol import Done, Piece, Reply, decode_reply, encode

__all__ = [
    "LARGE_BYTES",
    "PIECE_BYTES",
    "TEXT_CHUNK",
    "assemble",
    "reply_bodies",
    "reply_buffer",
    "reply_from_frames",
]

log = logging.getLogger("runtime.placement")

LARGE_BYTES = 1 << 20  # a value larger than this (encoded) travels in pieces
PIECE_BYTES = 256 * 1024  # about this much encoded data per piece (a few ms to decode)
TEXT_CHUNK = 256 * 1024  # characters per text piece (at most 1 MiB of UTF-8); a longer text is cut
_MAX_DEPTH = 32  # containers nested deeper than this travel whole
_KEEP = (bytes, bytearray, memoryview, datetime.datetime)  # what MessagePack carries as it is

_encoder = msgspec.msgpack.Encoder()
_SCALARS = frozenset({int, float, bool, type(None)})  # a value that needs no look before it travels


# -- where the tool ran ------------------------------------------------------------------


def reply_bodies(reply: Reply) -> Iterator[bytes]:
    """`reply` as the bodies of the frames that carry it: one, or pieces then the `Done`.

    A value that MessagePack cannot carry travels as None (its text still does).
    """
    if not isinstance(reply, Done):
        yield encode(reply)
        return
    result = reply.result
    if type(result.value) in _SCALARS and len(result.content) <= TEXT_CHUNK:  # as it is, at once
        try:
            body = encode(reply)
        except OverflowError:  # an int MessagePack cannot carry: only its text travels (below)
            pass
        else:
            yield body
            return
    same = result.value is result.content  # a text result: its value is its text
    streamed: list[Any] = []
    content = result.content
    if len(content) > TEXT_CHUNK:
        streamed.append("content")
    value: Any = None
    large_value: Any = None
    if not same and result.value is not None:
        try:
            raw = _encoder.encode(result.value)
        except (TypeError, ValueError, OverflowError):
            log.warning("tool %r: its result value does not encode; only its text travels", result.tool)
        else:
            if len(raw) > LARGE_BYTES:
                streamed.append("value")
                large_value = result.value
            else:
                value = msgspec.Raw(raw)
            del raw
    if "content" in streamed:
        yield from _split(content, 0)
    if large_value is not None:
        if not _opens(large_value):  # a Struct, a dataclass...: its fields, as MessagePack has them
            large_value = msgspec.to_builtins(large_value, builtin_types=_KEEP)
        yield from _split(large_value, 0)
    head = msgspec.structs.replace(result, content="" if "content" in streamed else content, value=value)
    yield encode(Done(result=head, retire=reply.retire, streamed=tuple(streamed), value_is_content=same))


def reply_buffer(reply: Reply) -> bytes | pickle.PickleBuffer:
    """`reply` as one object for Ray to return: its bytes, or for a large one its frames in one
    buffer that Ray passes out of band (zero-copy: the driver reads it in Ray's object store,
    where `reply_from_frames` takes it apart piece by piece)."""
    bodies = reply_bodies(reply)
    first = next(bodies)
    second = next(bodies, None)
    if second is None and len(first) <= LARGE_BYTES:
        return first
    frames = bytearray()
    for body in itertools.chain((first,), () if second is None else (second,), bodies):
        frames += len(body).to_bytes(4, "big")
        frames += body
    return pickle.PickleBuffer(frames)


def _piece(op: Any, data: Any = None) -> bytes:
    return _encoder.encode(Piece(op=op, data=data))


def _split(value: Any, depth: int) -> Iterator[bytes]:
    """The pieces of one value (a large text, list or dict is opened; anything else is a leaf)."""
    if depth < _MAX_DEPTH:
        if isinstance(value, str) and len(value) > TEXT_CHUNK:
            yield _piece("text")
            for start in range(0, len(value), TEXT_CHUNK):
                yield _piece("chars", value[start : start + TEXT_CHUNK])
            yield _piece("end")
            return
        if isinstance(value, list | tuple):
            yield _piece("list")
            yield from _runs(value, len(value), "items", value.__getitem__, depth)
            yield _piece("end")
            return
        if isinstance(value, dict):
            keys = list(value)

            def run(span: slice) -> dict[Any, Any]:
                return {key: value[key] for key in keys[span]}

            def one(i: int) -> Any:
                return value[keys[i]]

            yield _piece("map")
            yield from _runs(run, len(keys), "entries", one, depth, keys)
            yield _piece("end")
            return
    yield _piece("leaf", msgspec.Raw(_encoder.encode(value)))


def _runs(
    run: Any, count: int, op: Any, one: Callable[[int], Any], depth: int, keys: list[Any] | None = None
) -> Iterator[bytes]:
    """A container's elements (or entries) in runs of about `PIECE_BYTES` encoded, each encoded
    at once; a single element larger than that is opened in pieces of its own."""
    take = 16  # elements in the next run, adapted to the size of the last
    i = 0
    while i < count:
        raw = _encoder.encode(run[i : i + take] if keys is None else run(slice(i, i + take)))
        if len(raw) > 2 * PIECE_BYTES and take > 1:
            take //= 2  # too many at once: fewer (each retry costs at most what this run did)
            continue
        if take == 1 and len(raw) > PIECE_BYTES and _opens(one(i)):
            if keys is None:
                yield from _split(one(i), depth + 1)
            elif isinstance(keys[i], str | int):
                yield _piece("key", keys[i])
                yield from _split(one(i), depth + 1)
            else:
                yield _piece(op, msgspec.Raw(raw))
            i += 1
            continue
        yield _piece(op, msgspec.Raw(raw))
        i += take
        take = max(1, min(take * 4, take * PIECE_BYTES // max(len(raw), 1)))


def _opens(value: Any) -> bool:
    return isinstance(value, str | list | tuple | dict)


# -- in the runtime ------------------------------------------------------------------------

Read = Callable[[], Awaitable["bytes | bytearray | memoryview | None"]]


async def assemble(first: Piece, read: Read) -> Done:
    """The `Done` whose pieces begin with `first`, with what they carried put in place.

    `read` gives the next frame's body (None: the stream ended). The loop runs between pieces.

    Raises:
        ValueError: the pieces do not make a reply (the stream is corrupt or ended early).
    """
    source = _Source(read)
    values: list[Any] = []
    message: Reply = first
    while isinstance(message, Piece):
        values.append(await _value(message, source, 0))
        message = await source.next()
    if not isinstance(message, Done) or len(values) != len(message.streamed):
        raise ValueError("a large result's pieces did not end with its Done")
    result = msgspec.structs.replace(message.result, **dict(zip(message.streamed, values, strict=True)))
    if message.value_is_content:
        result = msgspec.structs.replace(result, value=result.content)
    return msgspec.structs.replace(message, result=result, streamed=(), value_is_content=False)


async def reply_from_frames(data: bytes | bytearray | memoryview) -> Reply:
    """The reply in a buffer of length-prefixed frames (what a Ray replica returns for a large one).

    Raises:
        ValueError: the buffer does not hold whole frames.
    """
    view = memoryview(data).cast("B")
    position = 0

    async def read() -> memoryview | None:
        nonlocal position
        if position == len(view):
            return None
        if len(view) - position < 4:
            raise ValueError("a frame's length is cut short")
        size = int.from_bytes(view[position : position + 4], "big")
        end = position + 4 + size
        if end > len(view):
            raise ValueError("a frame is cut short")
        body = view[position + 4 : end]
        position = end
        return body

    body = await read()
    if body is None:
        raise ValueError("no reply in the buffer")
    first = decode_reply(body)
    return await assemble(first, read) if isinstance(first, Piece) else first


class _Source:
    """The pieces, one decoded message at a time, with a checkpoint before each."""

    __slots__ = ("_read",)

    def __init__(self, read: Read) -> None:
        self._read = read

    async def next(self) -> Reply:
        await trio.lowlevel.checkpoint()
        body = await self._read()
        if body is None:
            raise ValueError("the stream ended in the middle of a large result")
        return decode_reply(body)

    async def piece(self) -> Piece:
        message = await self.next()
        if not isinstance(message, Piece):
            raise ValueError(f"a large result's pieces were cut by a {type(message).__name__}")
        return message


async def _value(piece: Piece, source: _Source, depth: int) -> Any:
    """One value: a leaf, or an opened text / list / map read up to its `end`."""
    op = piece.op
    if depth > _MAX_DEPTH:
        raise ValueError("a large result's pieces nest too deep")
    if op == "leaf":
        return piece.data
    if op == "text":
        text = ""
        while (piece := await source.piece()).op == "chars":
            chars = piece.data
            if not isinstance(chars, str):
                raise ValueError("a text piece that is not text")
            text += chars  # in place: `text` is this frame's only reference (see the module doc)
            del chars, piece
        _ended(piece)
        return text
    if op == "list":
        items: list[Any] = []
        while (piece := await source.piece()).op != "end":
            if piece.op == "items" and isinstance(piece.data, list):
                items.extend(piece.data)
            else:
                items.append(await _value(piece, source, depth + 1))
        return items
    if op == "map":
        entries: dict[Any, Any] = {}
        while (piece := await source.piece()).op != "end":
            if piece.op == "entries" and isinstance(piece.data, dict):
                entries.update(piece.data)
            elif piece.op == "key":
                entries[piece.data] = await _value(await source.piece(), source, depth + 1)
            else:
                raise ValueError(f"a {piece.op!r} piece inside a map")
        return entries
    raise ValueError(f"a {op!r} piece where a value begins")


def _ended(piece: Piece) -> None:
    if piece.op != "end":
        raise ValueError(f"a {piece.op!r} piece inside a text")
