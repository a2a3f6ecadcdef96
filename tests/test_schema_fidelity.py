"""Issue 13: nothing a Python type or docstring says is lost on the way to a provider's schema."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import uuid
from typing import Annotated, Any, Literal, Optional, TypedDict

import annotated_types as at
import jsonschema
import msgspec
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import InvalidArguments, SchemaError, Tool, ToolDefinitionError, ToolRegistry, tool
from runtime.schema import Array, Enum, Integer, Object, String, render_tool

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _props(t: object, provider: str = "jsonschema", strict: bool = False) -> dict[str, dict[str, object]]:
    rendered = render_tool(t.descriptor, provider, strict=strict)  # type: ignore[attr-defined]
    if provider == "openai":
        return rendered["function"]["parameters"]["properties"]  # type: ignore[no-any-return]
    return rendered["parameters"]["properties"]  # type: ignore[no-any-return]


# -- 1. a parameter's own words beat its type's docstring ----------------------------------------


class Address(msgspec.Struct):
    """A postal address anywhere in the world."""

    street: str
    city: str


@dataclasses.dataclass
class Window:
    """A span of days."""

    days: int


@tool
def ship(to: Address, window: Window) -> str:
    """Ship a parcel.

    Args:
        to: where the parcel goes.
        window: when it may arrive.
    """
    return "ok"


def test_parameter_description_from_args_section_beats_the_types_docstring() -> None:
    params = {p.name: p for p in ship.descriptor.parameters}
    assert params["to"].description == "where the parcel goes."
    assert params["window"].description == "when it may arrive."
    assert params["to"].type.description == "A postal address anywhere in the world."  # kept on the type
    assert _props(ship)["to"]["description"] == "where the parcel goes."
    assert _props(ship, "gemini")["window"]["description"] == "when it may arrive."


# -- 2. declaration order of Literal and Enum ----------------------------------------------------


class Level(enum.Enum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


@tool
def alert(level: Level, urgency: Literal["low", "medium", "high"], n: Literal[3, 1, 2] = 3) -> str:
    """Raise an alert."""
    return "ok"


def test_enum_and_literal_members_keep_declaration_order_in_every_dialect() -> None:
    params = {p.name: p for p in alert.descriptor.parameters}
    assert params["level"].type == Enum(values=("low", "medium", "high"))
    assert params["urgency"].type == Enum(values=("low", "medium", "high"))
    assert params["n"].type == Enum(values=(3, 1, 2))
    for provider in ("jsonschema", "anthropic", "gemini", "mcp"):
        key = "inputSchema" if provider == "mcp" else "input_schema" if provider == "anthropic" else None
        rendered = render_tool(alert.descriptor, provider)
        props = rendered[key]["properties"] if key else rendered["parameters"]["properties"]
        assert props["urgency"]["enum"] == ["low", "medium", "high"], provider
    strict = _props(alert, "openai", strict=True)
    assert strict["level"]["enum"] == ["low", "medium", "high"]


# -- 3. Annotated[T, "plain string"] -------------------------------------------------------------


@tool
def count(n: Annotated[int, "the count"], label: Annotated[str | None, "a label"] = None) -> int:
    """Count."""
    return n


def test_a_plain_string_in_annotated_is_the_description() -> None:
    assert count.descriptor.parameter("n").description == "the count"
    assert count.descriptor.parameter("label").description == "a label"
    assert _props(count)["n"] == {"type": "integer", "description": "the count"}


# -- 4. constraints: rendered, described where a dialect cannot say them, enforced -------------


@tool
def bounded(
    a: Annotated[int, pydantic.Field(gt=10, description="above ten")],
    b: Annotated[float, at.Ge(0), at.Lt(1)],
    c: Annotated[int, at.MultipleOf(5)],
    d: Annotated[str, at.MinLen(2), at.MaxLen(4)],
    e: Annotated[list[int], at.Len(1, 2)],
    f: Annotated[int, msgspec.Meta(le=3)],
    g: Annotated[str, pydantic.Field(pattern="^x")] = "x",
) -> int:
    """Take bounded values."""
    return a


GOOD = {"a": 11, "b": 0.5, "c": 10, "d": "abc", "e": [1], "f": 3}


def test_constraints_render_as_json_schema_keywords() -> None:
    props = _props(bounded)
    assert props["a"] == {"type": "integer", "exclusiveMinimum": 10, "description": "above ten"}
    assert props["b"] == {"type": "number", "minimum": 0, "exclusiveMaximum": 1}
    assert props["c"] == {"type": "integer", "multipleOf": 5}
    assert props["d"] == {"type": "string", "minLength": 2, "maxLength": 4}
    assert props["e"] == {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}
    assert props["f"] == {"type": "integer", "maximum": 3}
    assert props["g"]["pattern"] == "^x"


def test_constraints_become_words_where_the_dialect_has_no_keyword() -> None:
    strict = _props(bounded, "openai", strict=True)
    assert "minLength" not in strict["d"]
    assert "minLength: 2" in strict["d"]["description"]
    gemini = _props(bounded, "gemini")
    assert "multipleOf" not in gemini["c"]
    assert "a multiple of 5" in gemini["c"]["description"]
    assert "less than 1" in gemini["b"]["description"]


@pytest.mark.parametrize(
    ("field", "bad"),
    [("a", 10), ("b", 1.0), ("c", 7), ("d", "a"), ("e", []), ("f", 4), ("g", "y")],
)
def test_constraints_are_enforced_when_decoding(field: str, bad: object) -> None:
    bounded.decode_args(msgspec.json.encode(GOOD))  # the good values pass
    with pytest.raises(InvalidArguments) as info:
        bounded.decode_args(msgspec.json.encode({**GOOD, field: bad}))
    assert info.value.path == f"$.{field}"


def test_a_constraint_that_cannot_be_enforced_is_refused_at_definition() -> None:
    with pytest.raises(ToolDefinitionError, match=r"Predicate.*cannot be checked"):

        @tool
        def t(x: Annotated[int, at.Predicate(lambda v: v % 2 == 0)]) -> int:
            return x

    with pytest.raises(ToolDefinitionError, match="strict"):

        @tool
        def u(x: Annotated[int, pydantic.Field(strict=True)]) -> int:
            return x


@dataclasses.dataclass
class Inner:
    n: Annotated[int, at.Gt(0)]


def test_a_foreign_constraint_inside_a_nested_class_is_refused_not_dropped() -> None:
    with pytest.raises(ToolDefinitionError, match=r"field 'n' of Inner.*msgspec.Meta"):

        @tool
        def t(inner: Inner) -> int:
            return 0


class Limits(msgspec.Struct):
    n: Annotated[int, at.Gt(0), "how many"]


class LimitTool(Tool[Limits, int]):
    """Take a limit."""

    async def execute(self, args: Limits) -> int:
        return args.n


def test_foreign_constraints_on_a_class_tools_args_are_enforced_too() -> None:
    t = LimitTool()
    assert t.descriptor.parameter("n").type == Integer(exclusive_minimum=0, description="how many")
    with pytest.raises(InvalidArguments):
        t.decode_args('{"n": 0}')
    assert t.decode_args('{"n": 2}') == Limits(n=2)


# -- 5. the whole description, not its first paragraph ---------------------------------------


@tool
def report(day: str) -> str:
    """Write the daily report.

    Use it once a day, after the last deploy.

    Example:
        >>> report("2026-12-03")

    Args:
        day: the day.

    Returns:
        The report's text.

    Raises:
        ValueError: when the day is in the future.
    """
    return day


@tool
def only_returns(x: int) -> int:
    """
    Returns:
        the number.
    """
    return x


def test_every_paragraph_of_the_description_is_kept_and_the_sections_are_not() -> None:
    assert report.description == (
        "Write the daily report.\n\n"
        "Use it once a day, after the last deploy.\n\n"
        'Example:\n    >>> report("2026-12-03")'
    )
    assert "Returns" not in report.description
    assert "Raises" not in report.description


def test_a_docstring_with_only_a_returns_section_gives_no_description() -> None:
    assert only_returns.description == ""


# -- 6. attribute docstrings ---------------------------------------------------------------


class Filters(TypedDict):
    tag: str
    """Only items with this tag."""


@dataclasses.dataclass
class Page:
    size: int = 10
    """Items per page."""


class Query(msgspec.Struct):
    text: str
    """What to look for."""
    page: Page | None = None
    filters: Filters | None = None


class QueryTool(Tool[Query, int]):
    """Find items."""

    async def execute(self, args: Query) -> int:
        return 0


def test_attribute_docstrings_of_struct_dataclass_and_typeddict_fields_are_read() -> None:
    d = QueryTool().descriptor
    assert d.parameter("text").description == "What to look for."
    props = render_tool(d, "jsonschema")["parameters"]["properties"]
    page = props["page"]["anyOf"][0]
    assert page["properties"]["size"]["description"] == "Items per page."
    filters = props["filters"]["anyOf"][0]
    assert filters["properties"]["tag"]["description"] == "Only items with this tag."


# -- 7. registry.schemas("mcp") has the outputSchema the served listing has -----------------------


class Hit(msgspec.Struct):
    url: str


@tool
def find(q: str) -> list[Hit]:
    """Find."""
    return []


@tool
def first(q: str) -> Hit:
    """First hit."""
    return Hit(url=q)


@tool
def plain(q: str) -> str:
    """Text."""
    return q


async def test_mcp_schemas_carry_the_output_schema_the_server_lists() -> None:
    from runtime import open_runtime
    from runtime.mcp._server_catalog import Catalog

    registry = ToolRegistry([find, first, plain])
    schemas = {s["name"]: s for s in registry.schemas("mcp")}
    assert schemas["first"]["outputSchema"]["properties"] == {"url": {"type": "string"}}
    wrapped = schemas["find"]["outputSchema"]
    assert wrapped["required"] == ["result"]
    assert wrapped["properties"]["result"]["type"] == "array"
    assert "outputSchema" not in schemas["plain"]
    async with open_runtime(registry, tracing=False) as rt:
        served = {t.name: t for t in Catalog(rt).listing().tools}
    for name in ("find", "first"):
        assert served[name].output_schema == schemas[name]["outputSchema"]
    assert served["plain"].output_schema is None


# -- 8, 9. formats and bytes -----------------------------------------------------------------


@tool
def when(at_: datetime.datetime, on: datetime.date, by: datetime.time, key: uuid.UUID, blob: bytes) -> str:
    """Formats."""
    return ""


def test_datetime_date_time_uuid_have_formats_and_bytes_is_base64() -> None:
    props = _props(when)
    assert props["at_"] == {"type": "string", "format": "date-time"}
    assert props["on"] == {"type": "string", "format": "date"}
    assert props["by"] == {"type": "string", "format": "time"}
    assert props["key"] == {"type": "string", "format": "uuid"}
    assert props["blob"] == {"type": "string", "contentEncoding": "base64"}
    assert "base64-encoded" in _props(when, "openai", strict=True)["blob"]["description"]
    assert "base64-encoded" in _props(when, "gemini")["blob"]["description"]
    assert when.descriptor.parameter("blob").type == String(content_encoding="base64")


# -- 10. tuples keep their positions ---------------------------------------------------------------


@tool
def place(at: tuple[int, str]) -> str:
    """Place."""
    return ""


def test_a_tuple_keeps_its_positions() -> None:
    assert place.descriptor.parameter("at").type == Array(
        items=place.descriptor.parameter("at").type.items,  # type: ignore[union-attr]
        prefix_items=(Integer(), String()),
        min_items=2,
        max_items=2,
    )
    assert _props(place)["at"] == {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "items": False,
        "minItems": 2,
        "maxItems": 2,
    }
    for provider, strict in (("openai", True), ("gemini", False)):
        prop = _props(place, provider, strict=strict)["at"]
        assert "prefixItems" not in prop
        assert "exactly 2 items, by position 1: integer; 2: string" in prop["description"]
    with pytest.raises(InvalidArguments):
        place.decode_args('{"at": ["x", 1]}')


# -- JSON Schema 2020-12 documents, recursion --------------------------------------------------------


class TreeNode(msgspec.Struct):
    """A node of a tree."""

    value: int
    children: list[TreeNode] = []


@tool
def total(root: TreeNode) -> int:
    """Sum a tree."""
    return 0


def test_recursive_types_are_defs_with_refs_in_a_valid_2020_12_document() -> None:
    for provider, key in (("jsonschema", "parameters"), ("mcp", "inputSchema")):
        doc = render_tool(total.descriptor, provider)[key]
        assert doc["$schema"] == DIALECT
        jsonschema.Draft202012Validator.check_schema(doc)
        assert doc["properties"]["root"] == {"$ref": "#/$defs/TreeNode"}
        assert doc["$defs"]["TreeNode"]["description"] == "A node of a tree."
        validator = jsonschema.Draft202012Validator(doc)
        assert validator.is_valid({"root": {"value": 1, "children": [{"value": 2}]}})
        assert not validator.is_valid({"root": {"value": 1, "children": [{"value": "x"}]}})


class Expr(msgspec.Struct):
    left: Expr
    right: Expr


def test_a_recursive_type_gemini_cannot_cut_is_a_schema_error_naming_it() -> None:
    @tool
    def evaluate(e: Expr) -> int:
        return 0

    with pytest.raises(SchemaError, match="'Expr'"):
        render_tool(evaluate.descriptor, "gemini")
    assert render_tool(evaluate.descriptor, "anthropic")["input_schema"]["$defs"]["Expr"]


def test_the_args_object_of_a_class_is_an_object_named_after_it() -> None:
    node = QueryTool().descriptor.parameter("page").type
    assert any(isinstance(o, Object) and o.name == "Page" for o in getattr(node, "options", ()))


# -- the IR means what msgspec means ---------------------------------------------------------------

_LEAVES: list[Any] = [
    str,
    int,
    float,
    bool,
    Literal["b", "a"],
    Literal[3, "x", None],
    Annotated[int, msgspec.Meta(ge=0, le=10)],
    Annotated[float, msgspec.Meta(gt=0, lt=5)],
    Annotated[str, msgspec.Meta(min_length=1, max_length=3)],
    Level,
    Address,
]


def _types() -> st.SearchStrategy[Any]:
    def combine(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            children.map(lambda t: list[t]),  # type: ignore[valid-type]
            children.map(lambda t: tuple[t, ...]),  # type: ignore[valid-type]
            st.tuples(children, children).map(lambda ts: tuple[ts[0], ts[1]]),  # type: ignore[valid-type]
            children.map(lambda t: dict[str, t]),  # type: ignore[valid-type]
            children.map(lambda t: Optional[t]),  # noqa: UP045
        )

    return st.recursive(st.sampled_from(_LEAVES), combine, max_leaves=4)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 12)
    | st.floats(-1, 6, allow_nan=False)
    | st.sampled_from(["", "a", "b", "x", "abcd", "low", "high"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["street", "city", "k"]), children, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(tp=_types(), values=st.lists(_JSON, min_size=1, max_size=8))
def test_the_rendered_schema_accepts_exactly_what_msgspecs_own_schema_accepts(
    tp: Any, values: list[Any]
) -> None:
    def fn(x: Any) -> None:
        """Probe."""

    fn.__annotations__ = {"x": tp, "return": None}
    probe = tool(fn)
    ours = jsonschema.Draft202012Validator(render_tool(probe.descriptor, "jsonschema")["parameters"])
    theirs = jsonschema.Draft202012Validator(msgspec.json.schema(probe.args_type))
    for value in values:
        assert ours.is_valid({"x": value}) == theirs.is_valid({"x": value}), value
