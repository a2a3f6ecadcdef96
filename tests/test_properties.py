"""Property tests: whatever a model sends, decoding gives typed args or InvalidArguments; whatever
schema a server sends, parsing gives a node or SchemaError. Never any other exception."""

import dataclasses
import enum
import json
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import InvalidArguments, SchemaError, SimpleTool, Tool, ToolDescriptor, ToolParameter, tool
from runtime.schema import Array, Object, Ref, Union, descriptor_from_json_schema, parse_json_schema
from runtime.schema._from_jsonschema import DEFAULT_MAX_DEPTH
from runtime.schema._to_jsonschema import parameters_schema

EXAMPLES = settings(max_examples=300, deadline=None)


# -- tools under test ------------------------------------------------------------------------


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


class Position(msgspec.Struct):
    x: int
    y: float = 0.0


@tool
def place(
    a: int,
    name: str = "n",
    p: Position | None = None,
    tags: list[str] = [],  # noqa: B006
    mode: Mode = Mode.FAST,
    kind: Literal["a", "b"] | None = None,
    scores: dict[str, float] = {},  # noqa: B006
    key: int | str = 0,
    size: Annotated[int, msgspec.Meta(ge=1, le=10)] = 5,
) -> None:
    """Many parameter shapes."""


@tool
def ping() -> str:
    """No parameters at all."""
    return "pong"


@dataclasses.dataclass
class CopyArgs:
    source: str
    target: str
    overwrite: bool = False
    exclude: list[str] = dataclasses.field(default_factory=list)


class Copy(Tool[CopyArgs, bool]):
    async def execute(self, args: CopyArgs) -> bool:
        return True


class Bounded(msgspec.Struct):
    limit: int = 10
    where: Position | None = None

    def __post_init__(self) -> None:
        if self.limit < 0:
            raise ValueError("limit must be >= 0")


class Page(Tool[Bounded, int]):
    async def execute(self, args: Bounded) -> int:
        return args.limit


class Person(TypedDict):
    name: str
    age: NotRequired[int]


class Greet(SimpleTool[Person]):
    async def execute(self, args: Person) -> str:
        return args["name"]


TOOLS: list[Any] = [place, ping, Copy(), Page(), Greet()]


def _check_decoded(t: Any, raw: Any) -> None:
    error: InvalidArguments | None = None
    try:
        args = t.decode_args(raw)
    except InvalidArguments as exc:
        error = exc
    if error is not None:
        assert error.path.startswith("$")
        assert str(error)
        return
    if isinstance(t, Greet):
        assert isinstance(args, dict)
        assert isinstance(args["name"], str)
    else:
        assert isinstance(args, t.args_type)


# -- strategies ------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=10)
    | st.sampled_from(["fast", "slow", "a", "b", "", "x"])
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["a", "x", "y", "name"]) | st.text(max_size=6), children, max_size=5
        )
    ),
    max_leaves=8,
)


# -- argument decoding -----------------------------------------------------------------------


def _arguments_for(t: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Objects keyed by the tool's own parameter names (sometimes plus another key), so that
    decoding gets past the unknown-field check and into the values."""
    names = [p.name for p in t.descriptor.parameters]
    known = st.fixed_dictionaries({}, optional=dict.fromkeys(names, json_values))
    extra = st.dictionaries(st.sampled_from(["ctx", "zz"]) | st.text(max_size=4), json_values, max_size=1)
    return known | st.builds(lambda a, b: {**a, **b}, known, extra)


# One payload per example, decoded into every tool: objects keyed for some tool, or any JSON.
payloads = st.one_of(*(_arguments_for(t) for t in TOOLS), json_values)


@EXAMPLES
@given(value=payloads)
def test_any_json_value_decodes_or_is_invalid_arguments(value: Any) -> None:
    text = json.dumps(value)  # NaN and Infinity come out as invalid JSON: also a case to handle
    for t in TOOLS:
        _check_decoded(t, text)
        _check_decoded(t, text.encode())
        if isinstance(value, dict):
            _check_decoded(t, value)  # Anthropic / Gemini send an object, not text


@EXAMPLES
@given(raw=st.binary(max_size=64) | st.text(max_size=64))
def test_any_bytes_or_text_decode_or_are_invalid_arguments(raw: bytes | str) -> None:
    for t in TOOLS:
        _check_decoded(t, raw)


@EXAMPLES
@given(
    a=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    name=st.text(max_size=10),
    tags=st.lists(st.text(max_size=5), max_size=3),
    x=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    size=st.integers(min_value=1, max_value=10),
)
def test_well_typed_arguments_decode_to_the_values_sent(
    a: int, name: str, tags: list[str], x: int, size: int
) -> None:
    sent = {"a": a, "name": name, "p": {"x": x}, "tags": tags, "mode": "slow", "size": size}
    for raw in (json.dumps(sent), sent):
        args = place.decode_args(raw)
        assert (args.a, args.name, args.p, args.tags, args.mode, args.size) == (
            a,
            name,
            Position(x=x),
            tags,
            Mode.SLOW,
            size,
        )


# -- JSON Schema parsing ---------------------------------------------------------------------

SCHEMA_KEYS = [
    "$ref",
    "type",
    "anyOf",
    "oneOf",
    "allOf",
    "items",
    "prefixItems",
    "properties",
    "additionalProperties",
    "patternProperties",
    "required",
    "enum",
    "const",
    "nullable",
    "description",
    "title",
    "default",
    "format",
    "minimum",
    "maxLength",
    "$defs",
    "definitions",
]
REFS = [
    "#",
    "#/$defs/A",
    "#/$defs/B",
    "#/definitions/A",
    "#/properties/a",
    "#/items",
    "#/anyOf/0",
    "#/$defs/A/properties/a",
    "#/$defs/Missing",
    "http://example.com/s.json",
]
TYPES = ["string", "integer", "number", "boolean", "null", "array", "object"]
NAMES = ["a", "b", "c"]

noise = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-5, max_value=5)
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.sampled_from([*TYPES, *REFS])
)
# Random JSON with schema-ish keys: mostly malformed.
schemaish = st.recursive(
    noise,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from([*SCHEMA_KEYS, *NAMES]) | st.text(max_size=4), children, max_size=6)
    ),
    max_leaves=15,
)
# Schemas shaped like real ones (each key with a value of roughly the right kind), so that
# parsing gets deep: references, cycles, unions, nested objects, with some noise mixed in.
_leaf_schema = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), max_size=3),
        "$ref": st.sampled_from(REFS),
        "enum": st.lists(st.none() | st.integers() | st.text(max_size=3), max_size=3),
        "const": st.none() | st.integers() | st.text(max_size=3),
        "format": st.sampled_from(["date-time", "uuid", "email"]),
        "description": st.text(max_size=5),
        "nullable": st.booleans(),
        "minimum": st.integers(),
    },
)


def _schema_with(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    some = st.lists(children, min_size=1, max_size=3)
    return st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), max_size=3),
            "$ref": st.sampled_from(REFS),
            "properties": st.dictionaries(st.sampled_from(NAMES), children, max_size=3),
            "required": st.lists(st.sampled_from(NAMES), max_size=3),
            "items": children | some | st.booleans(),
            "prefixItems": some,
            "anyOf": some,
            "oneOf": some,
            "allOf": some,
            "additionalProperties": st.booleans() | children,
            "patternProperties": st.dictionaries(st.just("^x"), children, max_size=1),
            "nullable": st.booleans(),
            "description": st.text(max_size=5),
        },
    )


shaped = st.recursive(st.one_of(_leaf_schema, _leaf_schema, _leaf_schema, noise), _schema_with, max_leaves=8)
# References that make cycles: direct, through arrays and unions, through allOf, to the root.
_refs = st.sampled_from(
    [
        {"$ref": "#/$defs/A"},
        {"$ref": "#/$defs/B"},
        {"$ref": "#"},
        {"type": "array", "items": {"$ref": "#/$defs/A"}},
        {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]},
        {"allOf": [{"$ref": "#/$defs/A"}]},
        {"allOf": [{"$ref": "#/$defs/B"}, {"type": "object"}]},
        {"type": "object", "additionalProperties": {"$ref": "#/$defs/A"}},
    ]
)
_cyclic_object = st.fixed_dictionaries(
    {
        "type": st.just("object"),
        "properties": st.dictionaries(st.sampled_from(NAMES), _refs | shaped, max_size=3),
    },
    optional={
        "required": st.lists(st.sampled_from(NAMES), max_size=2),
        "allOf": st.lists(_refs, min_size=1, max_size=2),
    },
)
cyclic = st.builds(
    lambda root, a, b: {**root, "$defs": {"A": a, "B": b}},
    _refs | _cyclic_object,
    _refs | _cyclic_object,
    _refs | _cyclic_object,
)
schema_roots = st.one_of(
    schemaish,
    shaped,
    cyclic,
    st.builds(
        lambda body, a, b: (
            {**body, "$defs": {"A": a, "B": b}, "definitions": {"A": b}} if isinstance(body, dict) else body
        ),
        shaped,
        shaped,
        shaped,
    ),
)


@EXAMPLES
@given(schema=schema_roots)
def test_any_schema_parses_or_is_a_schema_error(schema: Any) -> None:
    try:
        node, definitions = parse_json_schema(schema)
    except SchemaError:
        node = None
    else:
        # Every Ref points at a definition, and no definition is only a Ref: the IR is closed.
        for found in (node, *definitions.values()):
            assert _ref_names(found) <= set(definitions)
        assert not any(isinstance(d, Ref) for d in definitions.values())
        # What parses also renders, finitely: definitions break every cycle.
        descriptor = ToolDescriptor(
            name="t", parameters=(ToolParameter(name="x", type=node),), definitions=definitions
        )
        json.dumps(parameters_schema(descriptor), default=str)
    try:
        descriptor = descriptor_from_json_schema("t", "", schema)
    except SchemaError:
        return
    json.dumps(parameters_schema(descriptor), default=str)
    assert node is not None or schema in (None, {})


def _ref_names(node: Any) -> set[str]:
    if isinstance(node, Ref):
        return {node.name}
    if isinstance(node, Array):
        return _ref_names(node.items)
    if isinstance(node, Union):
        return set().union(*(_ref_names(o) for o in node.options))
    if isinstance(node, Object):
        names = set().union(*(_ref_names(p.type) for p in node.properties))
        return names | (_ref_names(node.additional) if not isinstance(node.additional, bool) else set())
    return set()


@settings(max_examples=100, deadline=None)
@given(
    depth=st.integers(min_value=0, max_value=200),
    wrapper=st.sampled_from(["items", "anyOf", "properties", "ref"]),
)
def test_deep_schemas_parse_or_hit_the_depth_limit(depth: int, wrapper: str) -> None:
    schema: Any = {"type": "string"}
    defs: dict[str, Any] = {}
    for i in range(depth):
        if wrapper == "items":
            schema = {"type": "array", "items": schema}
        elif wrapper == "anyOf":
            schema = {"anyOf": [schema, {"type": "null"}]}
        elif wrapper == "properties":
            schema = {"type": "object", "properties": {"a": schema}}
        else:
            defs[f"D{i}"] = schema
            schema = {"$ref": f"#/$defs/D{i}"}
    if defs:
        schema = {**schema, "$defs": defs}
    error: SchemaError | None = None
    try:
        parse_json_schema(schema)
    except SchemaError as exc:
        error = exc
    # Every wrapper is one level, whether it nests directly or through a reference.
    assert (error is not None) == (depth > DEFAULT_MAX_DEPTH)
    assert error is None or "deeper than" in str(error)
