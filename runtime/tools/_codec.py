"""Arguments: JSON text (or an already-parsed object) -> a tool's typed args, in one pass.

Every tool's arguments decode through one msgspec Struct made once per tool with
`defstruct(..., forbid_unknown_fields=True)` and a cached decoder. What the schema allows,
the decoder takes:

- A parameter with a default whose type does not admit null is widened to `T | None` in
  that Struct, and a null is replaced by the default after decoding; an optional one without
  a default (a TypedDict `NotRequired` key) is left out: that is how OpenAI strict mode
  (where every property is required and "not sent" is sent as null) keeps defaults.
- An integral float (`5.0`) where an `int` is declared is that int (`_integral`).
- A non-empty mutable default (`tags: list[str] = ["a"]`) is copied for each call.
- A parameter whose type is made of pydantic models is kept as raw JSON by the Struct and
  validated by pydantic after (`runtime.schema._pydantic`); a pydantic model as the whole
  args type decodes through `ModelArgsCodec`.
- Below the top level, a null where a property may be omitted and its type has no null is
  "not sent" too (strict mode makes every property of every object required): such nulls are
  dropped and the arguments decoded again, so the property's default applies
  (`runtime.schema._nulls`). Only arguments that hold such a null pay for the second pass.

The schema shows the declared type; only the decoder is lenient, and only as JSON Schema is.
"""

from __future__ import annotations

import copy
import functools
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, Optional

import msgspec

from ..exceptions import InvalidArguments, ToolDefinitionError
from ..schema.lowlevel import OmittedNulls, adapter, invalid, mentions_model
from ._integral import decode_integral, refused_float

__all__ = ["ArgField", "ArgsCodec", "ModelArgsCodec", "accepts_none", "translate_error"]

_AT_PATH = re.compile(r"^(?P<msg>.*) - at `(?P<path>\$[^`]*)`$", re.DOTALL)
_encode = msgspec.json.Encoder().encode
_FIELD = re.compile(r"^Object (?P<what>missing required|contains unknown) field `(?P<name>[^`]*)`$")


class _Model(NamedTuple):
    """A field whose type is made of pydantic models: decoded as raw JSON, then validated by pydantic."""

    name: str
    json_name: str
    adapter: Any  # pydantic.TypeAdapter of the field's type
    default: Callable[[], Any] | None  # what "not sent" becomes; None: left out (a TypedDict key)
    nullable: bool  # null is a value of the type (else a null stands for "not sent")
    required: bool


class ArgField(NamedTuple):
    """One argument: its name, Python type, and default (`msgspec.NODEFAULT` if required)."""

    name: str
    type: Any
    default: Any = msgspec.NODEFAULT
    default_factory: Callable[[], Any] | None = None

    @property
    def required(self) -> bool:
        return self.default is msgspec.NODEFAULT and self.default_factory is None


def accepts_none(tp: Any) -> bool:
    """True when `None` is a valid value of the type `tp`."""
    if typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if tp is Any or tp is None or tp is type(None):
        return True
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return any(accepts_none(a) for a in typing.get_args(tp))
    if origin is Literal:
        return None in typing.get_args(tp)
    return False


class ArgsCodec:
    """Decodes a call's arguments for one tool.

    Attributes:
        struct_type: the msgspec Struct the arguments decode into (its fields are the
            tool's parameters, in order).
        field_names: the parameter names as the model writes them.
    """

    __slots__ = ("_build", "_decoder", "_fill", "_models", "field_names", "nulls", "plain", "struct_type")

    def __init__(
        self,
        struct_type: type[msgspec.Struct],
        *,
        fill: Sequence[tuple[str, Any, Callable[[], Any] | None]] = (),
        build: Callable[[Any], Any] | None = None,
        models: Sequence[_Model] = (),
    ) -> None:
        """Decode into `struct_type`; usually made by `ArgsCodec.for_fields`.

        Args:
            struct_type: the Struct the arguments decode into.
            fill: (name, default, factory) of fields whose null means "use the default".
            build: turns the decoded Struct into the tool's args type (None: the Struct is it).
            models: fields kept as raw JSON by the Struct and validated by pydantic (their
                types are made of pydantic models), see `_Model`.
        """
        self.struct_type = struct_type
        self.field_names: tuple[str, ...] = struct_type.__struct_encode_fields__
        try:
            self._decoder = msgspec.json.Decoder(struct_type)
        except TypeError as exc:  # a type msgspec cannot decode, e.g. `list[int] | list[str]`
            raise ToolDefinitionError(
                f"the arguments of {struct_type.__name__!r} cannot be decoded: {exc}"
            ) from exc
        self._fill = tuple(fill)
        self._build = build
        self._models = tuple(models)
        self.plain: Callable[[str], Any] | None = (
            self._decoder.decode if not self._fill and build is None and not self._models else None
        )
        """JSON text -> args in one step, when nothing is mended, built or validated after msgspec
        (most tools); on any error, `decode` says what is wrong (or mends it)."""
        self.nulls: OmittedNulls | None = None
        """Drops the nulls that stand for an omitted key below the top level (set by the tool from
        its descriptor; None when it has no such key)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> ArgsCodec:
        return self  # immutable, and its decoder cannot be copied: a copied tool shares it

    @classmethod
    def for_fields(
        cls,
        name: str,
        fields: Sequence[ArgField],
        *,
        build: Callable[[Any], Any] | None = None,
        unset_optional: Sequence[str] = (),
        rename: Mapping[str, str] | None = None,
    ) -> ArgsCodec:
        """Make the Struct for `fields` (strict: unknown fields are rejected).

        Args:
            name: the Struct's name (shows as the title of the schema).
            fields: the parameters, in order.
            build: turns the decoded Struct into the tool's args type.
            unset_optional: names that may be omitted without a default (TypedDict
                NotRequired keys); they decode to `msgspec.UNSET` when absent.
            rename: JSON names of fields whose JSON name differs from their Python name.
        """
        spec: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        fill: list[tuple[str, Any, Callable[[], Any] | None]] = []
        models: list[_Model] = []
        pydantic_loaded = "pydantic" in sys.modules  # else no type can be a pydantic model
        for f in fields:
            tp = f.type
            if pydantic_loaded and mentions_model(tp):  # kept as JSON text here, validated by pydantic after
                factory = f.default_factory
                if factory is None and not f.required and f.name not in unset_optional:
                    factory = functools.partial(copy.deepcopy, f.default)
                json_name = (rename or {}).get(f.name, f.name)
                models.append(
                    _Model(f.name, json_name, adapter(tp), factory, accepts_none(f.type), f.required)
                )
                if f.required and f.name not in unset_optional:
                    spec.append((f.name, msgspec.Raw))
                else:  # msgspec takes no Raw in a union: the default is filled in after decoding
                    spec.append((f.name, msgspec.Raw | msgspec.UnsetType, msgspec.UNSET))
                continue
            if f.name in unset_optional:
                if accepts_none(f.type):
                    spec.append((f.name, tp | msgspec.UnsetType, msgspec.UNSET))
                else:  # OpenAI strict mode sends null for a key the model leaves out: it stays out
                    spec.append((f.name, Optional[tp] | msgspec.UnsetType, msgspec.UNSET))  # noqa: UP045
                    fill.append((f.name, msgspec.UNSET, None))
            elif f.required:
                spec.append((f.name, tp))
            else:
                factory = f.default_factory
                if factory is None and type(f.default) not in _SCALAR_DEFAULTS and _mutable(f.default):
                    # `tags: list[str] = ["a"]`: each call gets its own copy (msgspec refuses a
                    # shared mutable default, and a function parameter has no default_factory).
                    factory = functools.partial(copy.deepcopy, f.default)
                default = msgspec.field(default_factory=factory) if factory else f.default
                if accepts_none(f.type):
                    spec.append((f.name, tp, default))
                else:
                    spec.append((f.name, Optional[tp], default))  # noqa: UP045 - tp is a runtime value
                    fill.append((f.name, f.default, factory))
        try:
            struct_type = msgspec.defstruct(
                name, spec, kw_only=True, forbid_unknown_fields=True, rename=dict(rename) if rename else None
            )
        except TypeError as exc:  # msgspec's words name its own API; say what to change here
            raise ToolDefinitionError(f"the arguments of {name!r} cannot be made into a type: {exc}") from exc
        return cls(struct_type, fill=fill, build=build, models=models)

    def _invalid(self, exc: msgspec.ValidationError) -> InvalidArguments:
        error = translate_error(exc, self.field_names)
        return _unloosen(error, self.loosened) if self._fill else error

    @property
    def loosened(self) -> tuple[str, ...]:
        """Names whose null decodes to their default (their type does not admit null)."""
        return tuple(name for name, _, _ in self._fill)

    def decode(self, raw: str | bytes | Mapping[str, Any]) -> Any:
        """Decode `raw` into the tool's args.

        Raises:
            InvalidArguments: not JSON, not an object, a missing, unknown or wrong-typed
                field; the error names the JSON path and what was expected.
        """
        if self._models and isinstance(raw, Mapping):
            raw = _json_of(raw)  # pydantic fields are read from JSON text
        try:
            if isinstance(raw, str | bytes):
                value = self._decoder.decode(raw)
            elif isinstance(raw, Mapping):
                value = msgspec.convert(raw, self.struct_type)
            else:
                raise InvalidArguments(f"arguments must be a JSON object, got {type(raw).__name__}")
        except msgspec.ValidationError as exc:
            if self.nulls is not None and "got `null`" in str(exc):
                mended = self._without_nulls(raw)
                if mended is not None:
                    return self.decode(mended)
            path = refused_float(exc)
            if path is None:
                raise self._invalid(exc) from None
            value = self._integral(raw, exc, path)
        except msgspec.DecodeError as exc:
            if isinstance(raw, str | bytes) and not raw.strip():
                return self.decode(b"{}")  # some models send "" for a tool without parameters
            raise InvalidArguments(f"arguments are not valid JSON ({exc}); send one JSON object") from None
        for name, default, factory in self._fill:
            if getattr(value, name) is None:
                setattr(value, name, factory() if factory is not None else default)
        if self._models:
            self._validate_models(value)
        if self._build is not None:
            try:
                return self._build(value)
            except (TypeError, ValueError) as exc:
                # The args type's own check (`__post_init__`), as msgspec reports it when it
                # decodes into the type directly.
                raise InvalidArguments(str(exc) or type(exc).__name__) from exc
        return value

    def _without_nulls(self, raw: str | bytes | Mapping[str, Any]) -> bytes | dict[str, Any] | None:
        """`raw` without the nulls that stand for an omitted key (JSON text stays JSON text), or
        None when it has none of them (the null the decoder refused is wrong in itself)."""
        nulls = self.nulls
        if nulls is None:
            return None
        if isinstance(raw, Mapping):
            data: Any = raw if type(raw) is dict else dict(raw)
        else:
            try:
                data = msgspec.json.decode(raw)
            except msgspec.DecodeError:
                return None
        if type(data) is not dict:
            return None
        mended = nulls(data)
        if mended is data:
            return None
        return mended if isinstance(raw, Mapping) else _encode(mended)

    def _validate_models(self, value: Any) -> None:
        import pydantic  # a field's type is a pydantic model: the user's code has imported it

        for name, json_name, validator, default, nullable, required in self._models:
            raw = getattr(value, name)
            if raw is msgspec.UNSET:  # not sent: its default, or left out (a TypedDict key)
                if default is not None:
                    setattr(value, name, default())
                continue
            data = bytes(raw)
            if data == b"null" and not nullable and not required:  # OpenAI strict mode's "not sent"
                setattr(value, name, default() if default is not None else msgspec.UNSET)
                continue
            try:
                setattr(value, name, validator.validate_json(data))
            except pydantic.ValidationError as exc:
                mended = self._field_without_nulls(json_name, data)
                if mended is None:
                    raise invalid(exc, f"$.{json_name}") from None
                try:
                    setattr(value, name, validator.validate_json(mended))
                except pydantic.ValidationError as again:
                    raise invalid(again, f"$.{json_name}") from None

    def _field_without_nulls(self, json_name: str, data: bytes) -> bytes | None:
        """One pydantic-typed argument's JSON without the nulls that stand for an omitted key."""
        nulls = self.nulls
        if nulls is None or b"null" not in data:
            return None
        try:
            mended = nulls({json_name: msgspec.json.decode(data)})
        except msgspec.DecodeError:
            return None
        return _encode(mended[json_name]) if json_name in mended else None

    def _integral(self, raw: str | bytes | Mapping[str, Any], exc: msgspec.ValidationError, path: str) -> Any:
        """`raw` decoded again with integral floats as ints where an int was refused (see `_integral`)."""
        if isinstance(raw, Mapping):
            data: Any = raw

            def attempt(fixed: Any) -> Any:
                return msgspec.convert(fixed, self.struct_type)
        else:
            try:
                data = msgspec.json.decode(raw)
            except msgspec.DecodeError as bad:  # broken after the value the typed decoder stopped at
                raise InvalidArguments(
                    f"arguments are not valid JSON ({bad}); send one JSON object"
                ) from None

            def attempt(fixed: Any) -> Any:
                return self._decoder.decode(_encode(fixed))  # the JSON path's own semantics

        value, error = decode_integral(data, attempt, path)
        if error is not None or value is None:
            raise self._invalid(error or exc) from None
        return value


class ModelArgsCodec:
    """Decodes the arguments of a tool whose args type is a pydantic model: pydantic validates
    the JSON text, as the model's config says; refusals read as msgspec's (see `_pydantic`).

    A top-level null for a field with a default whose type has no null is dropped first: it
    is OpenAI strict mode's "not sent", as for every other tool.
    """

    __slots__ = ("_loose", "_model", "field_names", "nulls", "struct_type")

    plain = None  # every call goes through pydantic

    def __init__(self, model: Any) -> None:
        self._model = model
        self.struct_type = model
        self.nulls: OmittedNulls | None = None  # set by the tool from its descriptor (see ArgsCodec)
        names: list[str] = []
        loose: list[str] = []
        for name, info in model.model_fields.items():
            shown = info.alias or name
            names.append(shown)
            if not info.is_required() and not accepts_none(info.annotation):
                loose.append(shown)
        self.field_names = tuple(names)
        self._loose = tuple(loose)

    @property
    def loosened(self) -> tuple[str, ...]:
        return self._loose

    def __deepcopy__(self, memo: dict[int, Any]) -> ModelArgsCodec:
        return self

    def decode(self, raw: str | bytes | Mapping[str, Any]) -> Any:
        """Validate `raw` into the model.

        Raises:
            InvalidArguments: naming the JSON path of the bad value and what was expected.
        """
        import pydantic  # the args type is a pydantic model: the user's code has imported it

        if isinstance(raw, Mapping):
            data: str | bytes = _json_of(raw)
        elif isinstance(raw, str | bytes):
            data = raw if raw.strip() else b"{}"  # some models send "" for a tool without parameters
        else:
            raise InvalidArguments(f"arguments must be a JSON object, got {type(raw).__name__}")
        if (self._loose or self.nulls is not None) and b"null" in (
            data.encode() if isinstance(data, str) else data
        ):
            data = self._without_nulls(data)
        try:
            return self._model.model_validate_json(data)
        except pydantic.ValidationError as exc:
            errors = exc.errors(include_url=False)
            if errors and errors[0].get("type") == "json_invalid":
                raise InvalidArguments(
                    f"arguments are not valid JSON ({errors[0].get('msg')}); send one JSON object"
                ) from None
            raise invalid(exc) from None

    def _without_nulls(self, data: str | bytes) -> str | bytes:
        try:
            value = msgspec.json.decode(data)
        except msgspec.DecodeError:
            return data  # pydantic says what is wrong with it
        if not isinstance(value, dict):
            return data
        dropped = {k: v for k, v in value.items() if v is not None or k not in self._loose}
        if self.nulls is not None:
            dropped = self.nulls(dropped)
        return _encode(dropped) if dropped != value else data


def _json_of(raw: Mapping[str, Any]) -> bytes:
    try:
        return _encode(raw)
    except Exception as exc:
        raise InvalidArguments(f"the arguments are not JSON: {exc}") from None


def _mutable(default: Any) -> bool:
    """A default msgspec will not share between instances: a non-empty list, dict, set or a mutable Struct."""
    kind = type(default)
    if kind in _SCALAR_DEFAULTS:
        return False
    if isinstance(default, _COLLECTIONS):
        return bool(default)
    return isinstance(default, msgspec.Struct) and not default.__struct_config__.frozen


_SCALAR_DEFAULTS = frozenset({int, float, str, bool, type(None), bytes, type(msgspec.NODEFAULT)})
_COLLECTIONS = (list, dict, set, bytearray)


def _unloosen(error: InvalidArguments, loosened: Sequence[str]) -> InvalidArguments:
    # A loosened field decodes as `T | None`; the model was told `T`, so say `T`.
    if error.path.startswith("$.") and error.path[2:] in loosened and " | null`" in error.expected:
        return InvalidArguments(error.expected.replace(" | null`", "`", 1), error.path)
    return error


def translate_error(exc: msgspec.ValidationError, fields: Sequence[str] = ()) -> InvalidArguments:
    """msgspec's validation message -> an InvalidArguments naming the JSON path."""
    text = str(exc)
    path = "$"
    match = _AT_PATH.match(text)
    if match:
        text, path = match["msg"], match["path"]
    field = _FIELD.match(text)
    if field:
        name = field["name"]
        child = f"{path}.{name}"
        if field["what"] == "missing required":
            return InvalidArguments("required field is missing", child)
        if path == "$" and fields:
            return InvalidArguments(f"unknown field; the parameters are: {', '.join(fields)}", child)
        return InvalidArguments("unknown field", child)
    if path == "$" and text.startswith("Expected `object`"):
        text = f"{text}; the arguments must be one JSON object"
    return InvalidArguments(text, path)
