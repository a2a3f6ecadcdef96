"""The direct Python-type -> IR path gives exactly the IR of the msgspec path it short-cuts."""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal, Optional

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import ToolDefinitionError, tool
from runtime.schema import descriptor_from_fields, direct_node
from runtime.tools import ArgField, ArgsCodec
from runtime.tools._base import describe

LEAVES: list[Any] = [
    str,
    int,
    float,
    bool,
    Any,
    Literal["b", "a"],
    Literal[3, "x", None],
    Literal[True],
    Annotated[int, msgspec.Meta(ge=0, le=10, description="a count")],
    Annotated[float, msgspec.Meta(gt=0, multiple_of=0.5)],
    Annotated[str, msgspec.Meta(min_length=1, max_length=5, pattern="^a", title="T", examples=["a"])],
    Annotated[str, "not a Meta"],
]


def _combine(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        children.map(lambda t: list[t]),  # type: ignore[valid-type]
        children.map(lambda t: tuple[t, ...]),  # type: ignore[valid-type]
        children.map(lambda t: set[t]),  # type: ignore[valid-type]
        children.map(lambda t: dict[str, t]),  # type: ignore[valid-type]
        children.map(lambda t: Optional[t]),  # noqa: UP045
        st.tuples(children, children).map(lambda ts: typing.Union[ts]),  # noqa: UP007
        children.map(lambda t: Annotated[t, msgspec.Meta(description="wrapped")]),
        children.map(lambda t: Annotated[list[t], msgspec.Meta(min_length=1)]),  # type: ignore[valid-type]
    )


TYPES = st.recursive(st.sampled_from(LEAVES), _combine, max_leaves=6)


def _msgspec_path(fields: list[tuple[str, Any, Any]], docs: dict[str, str]) -> Any:
    codec = ArgsCodec.for_fields("t", [ArgField(n, t, d) for n, t, d in fields])
    return describe(codec, name="t", description="d", param_docs=docs)


def _codec_or_none(fields: list[tuple[str, Any, Any]]) -> ArgsCodec | None:
    try:
        return ArgsCodec.for_fields("t", [ArgField(n, t, d) for n, t, d in fields])
    except ToolDefinitionError:
        return None


@settings(max_examples=400, deadline=None)
@given(
    types=st.lists(TYPES, min_size=1, max_size=3), defaults=st.lists(st.booleans(), min_size=3, max_size=3)
)
def test_direct_path_matches_the_msgspec_path(types: list[Any], defaults: list[bool]) -> None:
    fields = [(f"p{i}", t, None if defaults[i] else msgspec.NODEFAULT) for i, t in enumerate(types)]
    docs = {"p0": "from the docstring"}
    if _codec_or_none(fields) is None:
        # msgspec cannot decode the type (e.g. `list[int] | list[str]`): the tool is refused
        # when its codec is made, before any descriptor, so neither path is reached.
        with pytest.raises(ToolDefinitionError):
            _msgspec_path(fields, docs)
        return
    direct = descriptor_from_fields(fields, name="t", description="d", param_descriptions=docs)
    if direct is None:  # some combination msgspec handles itself (e.g. two Literals in a union)
        return
    assert direct == _msgspec_path(fields, docs)


@pytest.mark.parametrize(
    "tp",
    [
        pytest.param(msgspec.Struct, id="struct"),
        pytest.param(tuple[int, str], id="fixed tuple"),
        pytest.param(dict[int, str], id="int keys"),
        pytest.param(bytes, id="bytes"),
        pytest.param(Literal["a"] | Literal["b"], id="two literals"),
        pytest.param(Annotated[int, msgspec.Meta(extra_json_schema={"x": 1})], id="extra schema"),
        pytest.param(Annotated[list[int], msgspec.Meta(ge=1)], id="bound on a list"),
    ],
)
def test_types_the_direct_path_leaves_to_msgspec(tp: Any) -> None:
    assert direct_node(tp) is None


class Point(msgspec.Struct):
    x: int


def test_function_tools_use_the_direct_path_and_fall_back_for_the_rest() -> None:
    @tool
    def plain(a: int, b: Annotated[str, msgspec.Meta(description="bee")] = "x") -> None: ...

    @tool
    def nested(p: Point, n: int = 1) -> None: ...

    fields = [("a", int, msgspec.NODEFAULT), ("b", Annotated[str, msgspec.Meta(description="bee")], "x")]
    assert plain.descriptor.parameters == _msgspec_path(fields, {}).parameters
    assert plain.descriptor.parameter("b").description == "bee"
    assert direct_node(Point) is None
    assert nested.descriptor.parameter("p").type.name == "Point"  # type: ignore[union-attr]


def test_string_annotations_resolve_like_get_type_hints() -> None:
    import typing

    from runtime.tools._function import _quick_hints

    def f(
        a: Annotated[int, msgspec.Meta(ge=0)], b: list[str] | None = None, c: Point | None = None
    ) -> None: ...

    def g(tree: list["Point"]) -> None: ...  # noqa: UP037 - a name quoted inside: the general path

    assert _quick_hints(f) == typing.get_type_hints(f, include_extras=True)
    assert _quick_hints(f)["return"] is type(None)
    assert _quick_hints(g) is None
    assert tool(g).descriptor.parameter("tree").type.items.name == "Point"  # type: ignore[union-attr]
