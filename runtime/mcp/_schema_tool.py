"""Tools whose parameters are a JSON Schema document, kept as given: `JsonSchemaTool`.

An MCP server's tool comes with an `inputSchema`; a tool may also be declared with one. Such a
schema is kept as it is: the arguments are checked against it with a JSON Schema validator
(2020-12 unless its `$schema` names another draft), so `allOf`, `if`/`then`/`else`, `$anchor`
and an open object (no `additionalProperties: false`: extra arguments pass) all hold; served
over MCP, it is listed as given. The runtime's own IR (what providers are shown) is made from
the schema as far as it goes: keywords the IR has no form for are left out of what a model is
shown, never out of the check.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

import jsonschema  # type: ignore[import-untyped]  # no stubs; used through two calls
import msgspec
from jsonschema.exceptions import best_match  # type: ignore[import-untyped]

from ..exceptions import InvalidArguments, SchemaError, ToolRejected
from ..schema import ToolDescriptor, descriptor_from_json_schema
from ..schema.lowlevel import json_type
from ..tools import CallContext, ToolBase
from ..tools.lowlevel import check_tool_name
from ._quick_schema import quick_check

__all__ = ["JsonSchemaTool", "SchemaCheck", "schema_descriptor", "schema_validator"]

# What the IR is made from when the whole schema does not parse (e.g. `allOf` over non-objects).
_IR_KEYS = ("type", "properties", "required", "$defs", "definitions", "description", "title")


def schema_validator(schema: Mapping[str, Any]) -> Any:
    """A validator for `schema` (the draft its `$schema` names, 2020-12 by default).

    The schema is not checked against its metaschema here: that pass costs a millisecond a
    tool (a second per listing of a 1,000-tool server), and the IR is parsed from the same
    schema anyway, which refuses what is malformed. A schema the validator still cannot use
    fails the call that meets it, naming the schema's problem (`decode_checked`).
    """
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return SchemaCheck(cls(schema), quick_check(schema))


class SchemaCheck:
    """A schema's validator, and its quick yes for plain instances (`_quick_schema`), if any."""

    __slots__ = ("quick", "validator")

    def __init__(self, validator: Any, quick: Callable[[Any], bool] | None) -> None:
        self.validator = validator
        self.quick = quick


def schema_descriptor(name: str, description: str, schema: Mapping[str, Any], **extra: Any) -> ToolDescriptor:
    """The IR of a tool's JSON Schema parameters, as far as the IR can say it; the schema itself
    is kept as given (`input_schema`): the tool checks calls against it, and serves it.

    Raises:
        SchemaError: not even the schema's `properties` can be read.
    """
    try:
        descriptor = descriptor_from_json_schema(name, description, schema, **extra)
    except SchemaError:
        reduced = {k: schema[k] for k in _IR_KEYS if k in schema}
        reduced.setdefault("type", "object")
        descriptor = descriptor_from_json_schema(name, description, reduced, **extra)
        descriptor = msgspec.structs.replace(
            descriptor, notes=(*descriptor.notes, "Some rules of its schema are checked when it is called.")
        )
    return msgspec.structs.replace(descriptor, input_schema=dict(schema))


def decode_checked(check: SchemaCheck, raw: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
    """JSON text or a mapping -> a dict that `check`'s schema accepts.

    Raises:
        InvalidArguments: not JSON, not an object, or the schema refuses it (with the JSON path).
    """
    if isinstance(raw, str | bytes):
        kind = type(raw)
        try:
            value: Any = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            if not raw.strip():
                value = {}
            else:
                raise InvalidArguments(
                    f"arguments are not valid JSON ({exc}); send one JSON object"
                ) from None
        # JSON text without "null" in it has no null anywhere (a string with the word in it
        # is looked through, as a mapping's values always are)
        nulls = "null" in raw if kind is str else b"null" in raw if kind is bytes else True
    elif isinstance(raw, Mapping):
        value = dict(raw)
        nulls = True
    else:
        raise InvalidArguments(f"arguments must be a JSON object, got {type(raw).__name__}")
    if type(value) is not dict:
        raise InvalidArguments(
            f"Expected `object`, got `{type(value).__name__}`; the arguments must be one JSON object"
        )
    checked: dict[str, Any] = _drop_null_defaults(check.validator.schema, value) if nulls else value
    quick = check.quick
    if quick is not None and quick(checked):
        return checked
    validator = check.validator
    try:
        error = best_match(validator.iter_errors(checked))
    except (
        jsonschema.SchemaError,
        jsonschema.exceptions.UnknownType,
        re.error,
        TypeError,
        ValueError,
        KeyError,
    ) as exc:
        problem = _schema_problem(validator) or f"{type(exc).__name__}: {exc}"
        raise ToolRejected(f"the tool's own input schema cannot be used to check a call: {problem}") from None
    if error is not None:
        raise _invalid(error)
    return checked


def _schema_problem(validator: Any) -> str | None:
    """What the metaschema says of a validator's schema (only once a call has failed on it)."""
    try:
        type(validator).check_schema(validator.schema)
    except jsonschema.SchemaError as exc:
        return f"not a valid JSON Schema: {exc.message}"
    return None


def _drop_null_defaults(schema: Any, value: dict[str, Any]) -> dict[str, Any]:
    """`value` without the nulls that stand for "not sent": an optional property whose type has no null.

    OpenAI strict mode makes every property required, so the model sends null for each one it
    leaves out, at every depth (the strict schema offers that null: `runtime.schema._openai`).
    Properties are found where the schema puts them: `properties` (and `allOf` parts), `$ref`,
    array `items` and `prefixItems`, `additionalProperties`, and the options of an `anyOf` /
    `oneOf` the value fits (`_option`). Whatever is dropped, the result is then checked against
    the schema as given.
    """
    if not _has_null(value):
        return value
    dropped: dict[str, Any] = _without_nulls(schema, value, schema, 0)
    return dropped


def _has_null(value: Any) -> bool:
    """A null anywhere in decoded JSON (a plain loop: every MCP call's arguments pass here)."""
    for item in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
        if item is None or ((type(item) is dict or type(item) is list) and _has_null(item)):
            return True
    return False


def _resolved(schema: Any, root: Any) -> Any:
    for _ in range(8):  # a chain of references, not a cycle
        ref = schema.get("$ref") if isinstance(schema, Mapping) else None
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        node: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):
            return schema
        schema = node
    return schema


def _object_parts(schema: Mapping[str, Any], root: Any) -> tuple[dict[str, Any], set[str], Any]:
    """The properties an object schema names (its `allOf` parts' too), its required names, and
    the schema of the others (`additionalProperties`, when it is one)."""
    properties: dict[str, Any] = {}
    required: set[str] = set()
    extra: Any = None
    for part in (schema, *(_resolved(p, root) for p in schema.get("allOf") or () if isinstance(p, Mapping))):
        if isinstance(part, Mapping):
            props = part.get("properties")
            if isinstance(props, Mapping):
                properties.update(props)
            names = part.get("required")
            if isinstance(names, list):
                required.update(n for n in names if isinstance(n, str))
            more = part.get("additionalProperties")
            if isinstance(more, Mapping) and extra is None:
                extra = more
    return properties, required, extra


def _option(schema: Mapping[str, Any], value: Any, root: Any) -> Any:
    """What of the schema's `anyOf` / `oneOf` applies to `value` (a dict or a list): the one
    option it fits, or, when several fit, their union (`_union`), or None.

    No branch is guessed: two open objects that both fit `{"x": null}` (one names `x`, the
    other does not) are read together, so the null strict mode added for the first one's
    optional `x` is dropped by what that one says of `x`.
    """
    options = [
        _resolved(o, root)
        for key in ("anyOf", "oneOf")
        for o in schema.get(key) or ()
        if isinstance(o, Mapping)
    ]
    if not options:
        return None
    if isinstance(value, list):
        arrays = [o for o in options if _kind(o) == "array"]
        if len(arrays) > 1 and all(
            isinstance(o.get("items"), Mapping) and "prefixItems" not in o for o in arrays
        ):
            return {"type": "array", "items": {"anyOf": [o["items"] for o in arrays]}}
        return arrays[0] if len(arrays) == 1 else None
    objects = [o for o in options if _kind(o) == "object"]
    if len(objects) > 1:
        objects = [o for o in objects if _fits(o, value, root)]
    if len(objects) > 1:
        return _union(objects, root)
    return objects[0] if len(objects) == 1 else None


def _union(objects: list[Mapping[str, Any]], root: Any) -> dict[str, Any]:
    """Object schemas that a value fits alike, read as one: a property is what the options that
    name it say (`anyOf` when several do), required where every one of them requires it.

    So a null is dropped (`_without_nulls`) only for a property some fitting option leaves
    optional and none lets be null: the null strict mode added for "not sent". An option that
    does not name the property says nothing of it (an open object takes any value there, and
    takes the value without it alike).
    """
    named: dict[str, list[Any]] = {}
    requiring: dict[str, int] = {}
    extras: list[Any] = []
    for option in objects:
        properties, required, extra = _object_parts(option, root)
        for key, sub in properties.items():
            named.setdefault(key, []).append(_resolved(sub, root))
            requiring[key] = requiring.get(key, 0) + (key in required)
        if extra is not None:
            extras.append(extra)
    merged: dict[str, Any] = {
        "type": "object",
        "properties": {k: subs[0] if len(subs) == 1 else {"anyOf": subs} for k, subs in named.items()},
        "required": [k for k, subs in named.items() if requiring[k] == len(subs)],
    }
    if extras:
        merged["additionalProperties"] = extras[0] if len(extras) == 1 else {"anyOf": extras}
    return merged


def _kind(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind is None and ("properties" in schema or "additionalProperties" in schema):
        return "object"
    if kind is None and ("items" in schema or "prefixItems" in schema):
        return "array"
    return kind if isinstance(kind, str) else None


def _fits(schema: Mapping[str, Any], value: dict[str, Any], root: Any) -> bool:
    """Whether `value` can be an instance of the object `schema`: its required keys are there, a
    closed object knows every key, and a `const` (a tag) has its value."""
    properties, required, _ = _object_parts(schema, root)
    if not required <= value.keys():
        return False
    if schema.get("additionalProperties") is False and not value.keys() <= properties.keys():
        return False
    for key, sub in properties.items():
        sub = _resolved(sub, root)
        if key in value and isinstance(sub, Mapping) and "const" in sub and value[key] != sub["const"]:
            return False
    return True


def _without_nulls(schema: Any, value: Any, root: Any, depth: int) -> Any:
    schema = _resolved(schema, root)
    if depth > 32 or not isinstance(schema, Mapping):
        return value
    if not isinstance(value, dict | list):
        return value
    if "anyOf" in schema or "oneOf" in schema:
        option = _option(schema, value, root)
        if option is not None and option is not schema:
            value = _without_nulls(option, value, root, depth + 1)
        if "properties" not in schema and "items" not in schema and "prefixItems" not in schema:
            return value
    if isinstance(value, list):
        items = schema.get("items")
        positions = schema.get("prefixItems")
        out: list[Any] = []
        for i, item in enumerate(value):
            sub = positions[i] if isinstance(positions, list) and i < len(positions) else items
            out.append(_without_nulls(sub, item, root, depth + 1) if isinstance(sub, Mapping) else item)
        return out
    properties, required, extra = _object_parts(schema, root)
    result: dict[str, Any] = {}
    for key, item in value.items():
        sub = properties.get(key)
        if (
            item is None
            and sub is not None
            and key not in required
            and not _admits_null(_resolved(sub, root))
        ):
            continue
        if sub is None:
            sub = extra
        result[key] = _without_nulls(sub, item, root, depth + 1) if sub is not None else item
    return result


def _admits_null(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return True
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and any(_admits_null(o) for o in options):
            return True
    return kind is None and not any(
        k in schema for k in ("$ref", "anyOf", "oneOf", "enum", "const", "properties")
    )


def _invalid(error: Any) -> InvalidArguments:
    """A validator's error in the runtime's words: the JSON path of the value, and what was expected."""
    path = error.json_path
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        if len(missing) == 1:
            return InvalidArguments("required field is missing", f"{path}.{missing[0]}")
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = error.schema.get("properties") or {}
        extra = [name for name in error.instance if name not in known]
        if extra and not error.schema.get("patternProperties"):
            listed = f"; the parameters are: {', '.join(known)}" if path == "$" and known else ""
            return InvalidArguments(f"unknown field{listed}", f"{path}.{extra[0]}")
    if error.validator == "type":
        expected = error.validator_value
        names = " | ".join(expected) if isinstance(expected, list) else expected
        return InvalidArguments(f"Expected `{names}`, got `{json_type(error.instance)}`", path)
    return InvalidArguments(error.message, path)


class JsonSchemaTool(ToolBase[dict[str, Any], Any], dynamic=True):
    """A tool declared with a JSON Schema for its parameters; `fn(arguments, ctx)` does the work.

    ```python
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}

    async def search(arguments: dict, ctx: CallContext) -> list[str]:
        return [arguments["q"]]

    registry = ToolRegistry([JsonSchemaTool("search", "Search the index.", schema, search)])
    ```

    Attributes:
        json_schema: the parameters' schema, as given (checked with it, served over MCP with it).
    """

    takes_context: ClassVar[bool] = True

    def __init__(
        self,
        name: str,
        description: str,
        input_schema: Mapping[str, Any],
        fn: Callable[[dict[str, Any], CallContext], Awaitable[Any]],
        *,
        title: str | None = None,
        annotations: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Raises:
        SchemaError: `input_schema` is not a valid JSON Schema of an object.
        ValueError: `name` is not a valid tool name.
        """
        self.name = check_tool_name(name)
        self.json_schema = dict(input_schema)
        self._validator = schema_validator(self.json_schema)
        self.descriptor = schema_descriptor(
            name, description, self.json_schema, title=title, annotations=annotations
        )
        self.description = self.descriptor.description
        self.args_type = dict[str, Any]
        self.timeout = timeout
        self._fn = fn

    def decode_args(self, raw: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
        return decode_checked(self._validator, raw)

    async def execute(self, args: dict[str, Any], ctx: CallContext) -> Any:
        return await self._fn(args, ctx)

    def __repr__(self) -> str:
        return f"<JsonSchemaTool {self.name!r}>"
