"""Results: a tool's return value -> the text the model reads and the value `ToolSuccess` carries.

One object per tool (`ResultCodec`), made once, does the whole job for every call:

1. The value is checked against the tool's declared result type, when there is one to check
   (not `Any`, `object` or absent). The check is what the schema says: the value's JSON form
   decodes as the declared type. A plain `str`, `int`, `float`, `bool` or `None` is checked
   with one `isinstance`; `dict[str, Any]` and `list[Any]` by the first byte of their JSON;
   any other type by msgspec decoding the JSON that is made anyway (pydantic models by
   pydantic, an instance by `isinstance`). A value that does not fit raises `ResultTypeError`:
   loose (the default), it carries what the model reads, made from the value as it was
   returned, and the engine gives the model that, marks the result (`type_mismatch`: no MCP
   `structuredContent`, which the `outputSchema` would refuse), counts it and warns once per
   shape of mismatch (`warn_once`); strict (`strict_result=True`), the call is ERROR naming both.
   Real code's annotations are often looser than its values (`-> Dict[str, str]` returning a
   nested dict): the work was done and its value is usable.
2. The text: a `str` as it is, anything else as JSON. A value msgspec cannot encode (a custom
   class, `Ellipsis`, `mpmath.mpf`) is not an ERROR after the work was done: each object it
   cannot encode goes through the tool's `encoder` hook (`@tool(encoder=...)`), a pydantic
   model through its `model_dump`, anything else becomes its `str()`; and `ToolSuccess.value`
   is then that JSON form, so it crosses a process boundary as the text does.

The declared type is still checked after the hooks: `-> float` returning an `mpf` passes
with `encoder=float`, and is a mismatch without one (its `str()` is not a number).
"""

from __future__ import annotations

import collections.abc as cabc
import re
import typing
import warnings
from collections.abc import Callable
from typing import Any

import msgspec

from ..exceptions import ResultTypeError, ResultTypeWarning
from ..schema.lowlevel import adapter, is_model, mentions_model

__all__ = ["ResultCodec", "default_enc_hook", "encode_value", "mismatch_shape", "type_name"]

Encoder = Callable[[Any], Any]

_NO_CHECK: tuple[Any, ...] = (None, Any, object)
_OBJECTS = (dict, cabc.Mapping, cabc.MutableMapping)
_ARRAYS = (list, cabc.Sequence, cabc.MutableSequence, tuple)
_ANY = (Any, object)


def default_enc_hook(obj: Any) -> Any:
    """A pydantic model's JSON form (without importing pydantic); anything else is not encodable."""
    dump = getattr(obj, "model_dump", None)
    if callable(dump) and not isinstance(obj, type):
        return dump(mode="json")
    raise NotImplementedError(f"objects of type {type(obj).__name__} are not JSON-serializable")


_native = msgspec.json.Encoder(enc_hook=default_enc_hook)
_encode_native = _native.encode
_decode = msgspec.json.decode


def _fallback_hook(encoder: Encoder | None) -> Encoder:
    """The hook for what msgspec cannot encode: the tool's encoder, a pydantic model's dump, `str()`."""

    def hook(obj: Any) -> Any:
        if encoder is not None:
            try:
                return encoder(obj)
            except NotImplementedError:
                pass
        dump = getattr(obj, "model_dump", None)
        if callable(dump) and not isinstance(obj, type):
            return dump(mode="json")
        return str(obj)

    return hook


def encode_value(value: Any, encoder: Encoder | None = None) -> tuple[bytes, bool]:
    """`value` as JSON, and whether msgspec encoded it as it is (False: hooks or `str()` made it)."""
    try:
        return _encode_native(value), True
    except Exception:  # an object msgspec cannot encode: what the hooks make of it
        pass
    try:
        return msgspec.json.encode(value, enc_hook=_fallback_hook(encoder)), False
    except Exception:  # not even so (a dict with tuple keys, a cycle): its text, as a JSON string
        return msgspec.json.encode(_text_of(value)), False


def _text_of(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return repr(value)


def type_name(tp: Any) -> str:
    """A type as a person writes it: `list[str]`, `Forecast`, `int | None`."""
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    if tp is None or tp is type(None):
        return "None"
    return repr(tp).replace("typing.", "")


def _value_name(value: Any) -> str:
    if value is None:
        return "None"
    return f"a value of type `{type(value).__name__}`"


# How the declared type is checked (see the module's docstring).
_SKIP, _STR, _INT, _FLOAT, _BOOL, _NONE, _OBJECT, _ARRAY, _MODEL, _TYPED = range(10)
_SCALARS = {str: _STR, int: _INT, float: _FLOAT, bool: _BOOL, type(None): _NONE}


def _mode(tp: Any) -> int:
    try:
        if tp in _NO_CHECK:
            return _SKIP
        scalar = _SCALARS.get(tp)
    except TypeError:  # an unhashable annotation
        scalar = None
    if scalar is not None:
        return scalar
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp in _OBJECTS or (origin in _OBJECTS and len(args) == 2 and args[0] is str and args[1] in _ANY):
        return _OBJECT
    if tp in _ARRAYS or (origin in (list, cabc.Sequence, cabc.MutableSequence) and args and args[0] in _ANY):
        return _ARRAY
    if is_model(tp):
        return _MODEL
    return _TYPED


class ResultCodec:
    """Turns one tool's return values into (text for the model, `ToolSuccess.value`); see the module.

    Attributes:
        result_type: the declared result type (None: nothing to check).
    """

    __slots__ = ("_check", "_encoder", "_mode", "_name", "present", "result_type", "strict")

    def __init__(
        self, tool_name: str, result_type: Any, encoder: Encoder | None = None, *, strict: bool = False
    ) -> None:
        self._name = tool_name
        self.result_type = result_type
        self._encoder = encoder
        self.strict = strict
        """A value that is not of the declared type fails the call (else the model reads it as returned)."""
        mode = _mode(result_type)
        self._check: Callable[[bytes], Any] | None = None
        if mode == _TYPED:
            try:
                if mentions_model(result_type):
                    self._check = adapter(result_type).validate_json
                else:
                    self._check = msgspec.json.Decoder(result_type).decode
            except Exception:  # a type neither msgspec nor pydantic can check: not checked
                mode = _SKIP
        elif mode == _MODEL:
            self._check = adapter(result_type).validate_json
        self._mode = mode
        self.present: Callable[[Any], tuple[str, Any]] = _fast_path(mode, self._present)
        """(the text the model reads, what `ToolSuccess.value` carries) for one returned value.

        Raises:
            ResultTypeError: the value is not of the declared result type (loose: with what the
                model reads of it as returned, in `returned`).
        """

    def __deepcopy__(self, memo: dict[int, Any]) -> ResultCodec:
        return self  # immutable (its check holds a decoder, which cannot be copied)

    def _present(self, value: Any) -> tuple[str, Any]:
        mode = self._mode
        if type(value) is str and (mode in (_SKIP, _STR)):
            return value, value
        data, native = encode_value(value, self._encoder)
        if mode != _SKIP and not (native and self._fits(mode, value)):
            self._verify(mode, value, data, native)
            if mode == _STR:  # an encoder made the declared str: the text is the string itself
                text: str = _decode(data)
                return text, text
        return data.decode(), value if native else _decode(data)

    @property
    def checks(self) -> bool:
        """Whether results are checked at all (a declared type other than `Any`, `object`, none)."""
        return self._mode != _SKIP

    def check(self, value: Any) -> None:
        """Check `value` against the declared result type, for a tool whose own hooks make its text.

        Raises:
            ResultTypeError: it is not of that type.
        """
        mode = self._mode
        if mode == _SKIP:
            return
        data, native = encode_value(value, self._encoder)
        if not (native and self._fits(mode, value)):
            self._verify(mode, value, data, native)

    def _fits(self, mode: int, value: Any) -> bool:
        """The cheap part of the check: True when one `isinstance` says the value is of the declared type."""
        kind = type(value)
        if mode == _INT:
            return kind is int or (isinstance(value, int) and kind is not bool)
        if mode == _FLOAT:
            return kind is float or kind is int or (isinstance(value, int | float) and kind is not bool)
        if mode == _BOOL:
            return kind is bool
        if mode == _NONE:
            return value is None
        if mode == _STR:
            return isinstance(value, str)
        if mode == _MODEL:
            return isinstance(value, self.result_type)  # pydantic validated it when it was made
        return False  # decoded as the declared type (its JSON was made anyway)

    def _verify(self, mode: int, value: Any, data: bytes, native: bool = True) -> None:
        if mode == _SKIP:
            return
        if mode == _OBJECT:
            if data[:1] != b"{":
                self._mismatch(value, f"Expected `object`, got `{_json_kind(data)}`", data, native)
            return
        if mode == _ARRAY:
            if data[:1] != b"[":
                self._mismatch(value, f"Expected `array`, got `{_json_kind(data)}`", data, native)
            return
        check = self._check
        if check is None:
            check = msgspec.json.Decoder(self.result_type).decode  # a plain scalar type
        try:
            check(data)
        except msgspec.ValidationError as exc:
            self._mismatch(value, str(exc), data, native)
        except Exception as exc:  # pydantic's ValidationError
            errors = getattr(exc, "errors", None)
            if not callable(errors):
                raise
            from ..schema.lowlevel import invalid

            self._mismatch(value, str(invalid(exc)), data, native)

    def _mismatch(self, value: Any, why: str, data: bytes, native: bool = True) -> typing.NoReturn:
        hint = "" if native else "; msgspec cannot encode it: give the tool an encoder= that can"
        message = (
            f"tool {self._name!r} returned {_value_name(value)}, which is not its declared result type "
            f"`{type_name(self.result_type)}` ({why}{hint})"
        )
        if self.strict:
            raise ResultTypeError(message)
        # What the model reads: the value as it was returned (a string as it is, anything else
        # as JSON, made through the encoder hook or `str()` where msgspec cannot encode it).
        text = value if type(value) is str else data.decode()
        raise ResultTypeError(message, returned=(text, value if native else _decode(data)))

    @staticmethod
    def warn_once(message: str) -> None:
        """Warn the developer of a mismatch (`ResultTypeError`'s message), once per tool and shape
        of it in this process (the message names the tool: tools made afresh for each session or
        object, `tools_of(obj)`, warn once between them).

        A warnings filter of "error" raises the warning here, each time (the engine then fails the
        call); a shape is only marked as told once the warning went out.
        """
        shape = mismatch_shape(message)
        if shape in _WARNED or len(_WARNED) >= _MAX_SHAPES:
            return
        warnings.warn(
            ResultTypeWarning(
                f"{message}; the model read it as returned. Correct the annotation, or declare the "
                "tool strict_result=True to fail such calls"
            ),
            stacklevel=2,
        )
        _WARNED.add(shape)


_MAX_SHAPES = 4096  # shapes of mismatch warned of in one process (then no more: a bound, not a leak)
_WARNED: set[str] = set()
_INDEX = re.compile(r"\[\d+\]")
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'")


def mismatch_shape(message: str) -> str:
    """A mismatch's message without what varies from one value to the next (positions in a list,
    quoted values), so that every value that misses the declared type the same way has one shape."""
    tool, said, rest = message.partition(" returned ")  # the tool's name stays as it is
    return tool + said + _QUOTED.sub("'...'", _INDEX.sub("[...]", rest))


def _fast_path(mode: int, general: Callable[[Any], tuple[str, Any]]) -> Callable[[Any], tuple[str, Any]]:
    """`general`, behind the one test that settles the common case of `mode` (the per-call cost).

    A value that passes it is of the declared type and natively encodable; anything else takes
    the general path, which checks it fully (and may find it fine: an int subclass, a hook).
    """
    encode = _encode_native
    if mode == _SKIP:

        def present(value: Any) -> tuple[str, Any]:
            if type(value) is str:
                return value, value
            try:
                return encode(value).decode(), value
            except Exception:
                return general(value)

    elif mode == _STR:

        def present(value: Any) -> tuple[str, Any]:
            return (value, value) if type(value) is str else general(value)

    elif mode == _INT:  # the commonest declared result: one identity test

        def present(value: Any) -> tuple[str, Any]:
            if type(value) is int:
                return encode(value).decode(), value
            return general(value)

    elif mode in _EXACT:
        kinds = _EXACT[mode]

        def present(value: Any) -> tuple[str, Any]:
            if type(value) in kinds:
                return encode(value).decode(), value
            return general(value)

    else:
        return general
    return present


_EXACT = {_FLOAT: (float, int), _BOOL: (bool,), _NONE: (type(None),)}


def _json_kind(data: bytes) -> str:
    first = data[:1]
    if first == b"[":
        return "array"
    if first == b"{":
        return "object"
    if first == b'"':
        return "str"
    if first in (b"t", b"f"):
        return "bool"
    if first == b"n":
        return "null"
    return "float" if b"." in data or b"e" in data.lower() else "int"
