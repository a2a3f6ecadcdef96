"""Integral floats where an integer is expected: JSON Schema's `integer` accepts `5.0`, so the decoder does.

Models often write `5.0` for an integer parameter, and JSON Schema (which is what they are
shown) counts it as an integer: a number is an integer when its fractional part is zero,
whatever its spelling. msgspec's strict decoding refuses a float for `int` (and its lax mode
would also take `"5"`, which the schema does not allow), so the arguments are decoded
strictly first (every call that does not need this pays nothing) and, when msgspec refuses
a float where it wanted an int, decoded again with the integral floats at the path it named
turned into ints. A float with a fractional part (`5.5`) is still refused, as the schema says.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

__all__ = ["decode_integral", "refused_float"]

_GOT_FLOAT = re.compile(r"^Expected `(?P<expected>[^`]*)`, got `float`(?: - at `(?P<path>\$[^`]*)`)?$")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_MAX_ROUNDS = 1000  # containers repaired, one decode each: a bound on what one call can cost


def refused_float(exc: msgspec.ValidationError) -> str | None:
    """The JSON path where msgspec refused a float for an `int` (alone or in a union), else None."""
    match = _GOT_FLOAT.match(str(exc))
    if match is None or "int" not in match["expected"].split(" | "):
        return None
    return match["path"] or "$"


def decode_integral(
    data: Any, attempt: Callable[[Any], Any], path: str
) -> tuple[Any, msgspec.ValidationError | None]:
    """Decode `data` (parsed JSON, copied here before it is changed) with `attempt`, turning the
    integral floats at each refused path into ints.

    Returns:
        (value, None) once `attempt` succeeds; (None, error) with the error to report when a
        refusal cannot be repaired (a float with a fraction, another kind of error).
    """
    data = _thaw(data)
    error: msgspec.ValidationError | None = None
    for _ in range(_MAX_ROUNDS):
        if not _repair(data, path):
            return None, error
        try:
            return attempt(data), None
        except msgspec.ValidationError as exc:
            error = exc
            found = refused_float(exc)
            if found is None:
                return None, exc
            path = found
    return None, error


def _thaw(value: Any) -> Any:
    """A copy of every dict and list in `value` (what `_repair` changes), leaves shared."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


def _repair(data: Any, path: str) -> bool:
    """Turn the integral floats at `path` into ints; False when there were none.

    msgspec names a dict's value `[...]` (without its key): every value of that dict is looked
    at. An item of a list repairs its integral siblings too (they share the item type, and a
    `float` item takes an int as the same number), so a list of a thousand `n.0` is one round.
    """
    holders: list[Any] = [None]
    keys: list[Any] = [None]
    containers: list[tuple[Any, Any]] = [(None, data)]
    for name, index in _STEP.findall(path[1:]):
        step: list[tuple[Any, Any]] = []
        for _, node in containers:
            if name:
                if isinstance(node, dict) and name in node:
                    step.append((node, name))
            elif index == "...":
                if isinstance(node, dict):
                    step.extend((node, k) for k in node)
            elif isinstance(node, list) and int(index) < len(node):
                step.append((node, int(index)))
        containers = [(holder, holder[key]) for holder, key in step]
        holders = [h for h, _ in step]
        keys = [k for _, k in step]
        if not step:
            return False
    repaired = False
    for holder, key in zip(holders, keys, strict=True):
        if holder is None:
            return False  # the whole payload is a number: not an object of arguments
        if isinstance(holder, list):
            for i, item in enumerate(holder):
                if _integral(item):
                    holder[i] = int(item)
                    repaired = True
        elif _integral(holder[key]):
            holder[key] = int(holder[key])
            repaired = True
    return repaired


def _integral(value: Any) -> bool:
    return type(value) is float and value.is_integer()
