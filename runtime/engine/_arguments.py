"""Bounds on a call's arguments, checked before they are decoded.

A model (or a caller) can send anything as arguments: megabytes, JSON nested a thousand deep,
text with lone surrogates, objects that are not JSON at all. Each is refused here with an
InvalidArguments that names where the problem is, before the decoder (or a recursion limit)
can be hurt by it. The common case costs two `str.count` calls.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..exceptions import InvalidArguments
from ..tools.lowlevel import result_encoder

__all__ = ["check_arguments", "json_path_at", "not_unicode"]

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]')
_BTOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:,]')
_SURROGATE = re.compile("[\ud800-\udfff]")
_encode = result_encoder.encode


def check_arguments(raw: Any, max_bytes: int, max_depth: int) -> None:
    """Refuse arguments that are too large, too deep, not Unicode or not JSON.

    Raises:
        InvalidArguments: naming the JSON path of the problem and the limit.
    """
    if type(raw) is str:
        if len(raw) * 4 > max_bytes:  # only then can its UTF-8 be over the limit
            try:
                size = len(raw.encode())
            except UnicodeEncodeError as exc:
                raise _not_unicode(raw, exc.start) from None
            _check_size(size, max_bytes)
        # Shorter text with a lone surrogate fails to decode (UnicodeEncodeError): see `not_unicode`.
        if raw.count("[") + raw.count("{") > max_depth:  # the opening brackets bound the depth
            _check_depth(raw, _TOKEN, max_depth, "[{", "]}")
    elif isinstance(raw, bytes | bytearray | memoryview):
        raw = bytes(raw)
        _check_size(len(raw), max_bytes)
        if raw.count(b"[") + raw.count(b"{") > max_depth:
            _check_depth(raw, _BTOKEN, max_depth, b"[{", b"]}")
    elif isinstance(raw, Mapping):  # already parsed (Anthropic, Gemini, `Runtime.invoke`)
        try:
            data = _encode(raw)
        except RecursionError:
            raise InvalidArguments(f"nested deeper than the limit of {max_depth} levels", "$") from None
        except UnicodeEncodeError:
            raise InvalidArguments("a string is not valid Unicode (it holds a lone surrogate)", "$") from None
        except Exception as exc:  # an object that is not JSON (the caller's, e.g. `object()`)
            raise InvalidArguments(f"the arguments are not JSON: {exc}", "$") from None
        _check_size(len(data), max_bytes)
        if data.count(b"[") + data.count(b"{") > max_depth:
            _check_depth(data, _BTOKEN, max_depth, b"[{", b"]}")


def _check_size(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise InvalidArguments(f"{size} bytes, over the limit of {max_bytes}", "")  # the whole payload


def _check_depth(text: Any, token: re.Pattern[Any], max_depth: int, openers: Any, closers: Any) -> None:
    depth = 0
    for match in token.finditer(text):
        char = match.group()
        if len(char) != 1:
            continue  # a string: brackets inside it do not count
        if char in openers:
            depth += 1
            if depth > max_depth:
                raise InvalidArguments(
                    f"nested deeper than the limit of {max_depth} levels",
                    json_path_at(text, match.start(), token),
                )
        elif char in closers:
            depth -= 1


def not_unicode(raw: Any, exc: UnicodeError) -> InvalidArguments:
    """The InvalidArguments for text that could not be decoded because it is not Unicode."""
    position = getattr(exc, "start", 0)
    if isinstance(raw, str):
        found = _SURROGATE.search(raw)
        position = found.start() if found is not None else position
        return _not_unicode(raw, position)
    return InvalidArguments("text is not valid Unicode", "$")


def _not_unicode(raw: str, position: int) -> InvalidArguments:
    return InvalidArguments(
        f"text is not valid Unicode (a lone surrogate at character {position})",
        json_path_at(raw, position, _TOKEN),
    )


def json_path_at(text: Any, position: int, token: re.Pattern[Any] = _TOKEN) -> str:
    """The JSON path of the value at `position` in JSON `text` (best effort; `$` if lost)."""
    str_text = isinstance(text, str)
    path: list[Any] = []  # per open container: an index (array) or the key (object)
    pending_key: str | None = None
    for match in token.finditer(text, 0, position + 1):
        if match.start() > position:
            break
        tok = match.group() if str_text else match.group().decode("utf-8", "replace")
        if len(tok) > 1 or tok == '"':  # a string
            if match.end() > position:  # the position is inside this string
                break
            if path and isinstance(path[-1], str | type(None)) and pending_key is None:
                pending_key = tok[1:-1]
            continue
        if tok == "[":
            path.append(0)
        elif tok == "{":
            path.append(None)
            pending_key = None
        elif tok in "]}":
            if path:
                path.pop()
        elif tok == ":" and path and not isinstance(path[-1], int):
            path[-1] = pending_key
            pending_key = None
        elif tok == "," and path:
            if isinstance(path[-1], int):
                path[-1] += 1
            else:
                path[-1] = None
                pending_key = None
        if match.start() == position:
            break
    parts = ["$"]
    for item in path:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item is not None:
            parts.append(f".{item}")
    return "".join(parts)
