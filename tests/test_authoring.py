"""The authoring layer: `@tool`, class tools, `ToolSet`, CallContext injection, argument decoding."""

import dataclasses
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any, NotRequired, Protocol, TypedDict, TypeVar

import msgspec
import pytest

from runtime import (
    CallContext,
    Description,
    InvalidArguments,
    SimpleTool,
    TextPart,
    Tool,
    ToolBase,
    ToolCallMetadata,
    ToolDefinitionError,
    ToolRegistry,
    ToolRejected,
    ToolSet,
    fail,
    tool,
    validate,
)
from runtime.schema import Array, Integer, Null, Object, String, Union

# -- @tool on functions --------------------------------------------------------------------


@tool
def add(a: int, b: int = 2) -> int:
    """Add two numbers.

    The second paragraph is part of the description too.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


@tool
async def fetch(url: str) -> str:
    """Fetch a page."""
    return f"page at {url}"


@tool(name="lookup", description="Look something up.", timeout=2.5, max_concurrency=4, mailbox_size=8)
def look_up(key: str) -> str:
    """Docstring that the override replaces."""
    return key.upper()


@tool()
def bare_parentheses(x: int) -> int:
    return x


def test_tool_without_parentheses_uses_the_function_name_and_docstring() -> None:
    assert add.name == "add"
    assert add.description == "Add two numbers.\n\nThe second paragraph is part of the description too."
    assert add.descriptor.name == "add"
    assert add.descriptor.description == add.description
    assert [(p.name, p.description) for p in add.descriptor.parameters] == [
        ("a", "the first number."),
        ("b", "the second number."),
    ]


def test_tool_with_empty_parentheses_is_the_same_as_without() -> None:
    assert bare_parentheses.name == "bare_parentheses"
    assert bare_parentheses.description == ""
    assert bare_parentheses(3) == 3


def test_tool_options_override_name_and_description() -> None:
    assert look_up.name == "lookup"
    assert look_up.description == "Look something up."
    assert look_up.descriptor.name == "lookup"
    assert look_up.descriptor.description == "Look something up."
    assert (look_up.timeout, look_up.max_concurrency, look_up.mailbox_size) == (2.5, 4, 8)


def test_tool_option_defaults() -> None:
    assert add.timeout is None
    assert add.max_concurrency is None
    assert add.mailbox_size == 1024
    assert add.on_full == "wait"
    assert add.inline is False
    assert add.restart_on == ()


def test_explicit_empty_description_is_kept() -> None:
    @tool(description="")
    def quiet(x: int) -> int:
        """Would be the description."""
        return x

    assert quiet.description == ""


def test_restart_on_accepts_any_iterable_of_exception_classes() -> None:
    @tool(restart_on=[ConnectionError, TimeoutError], on_full="reject", inline=True)
    def flaky(x: int) -> int:
        return x

    assert flaky.restart_on == (ConnectionError, TimeoutError)
    assert flaky.on_full == "reject"
    assert flaky.inline is True


def test_sync_function_tool_dispatches_to_the_function() -> None:
    assert add.is_async is False
    assert add.dispatch(add.decode_args('{"a": 1, "b": 5}'), None) == 6
    assert add(1) == 3  # calling the tool calls the function


async def test_async_function_tool_dispatches_to_an_awaitable() -> None:
    assert fetch.is_async is True
    assert await fetch.dispatch(fetch.decode_args('{"url": "https://x"}'), None) == "page at https://x"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "timeout must be a positive number of seconds or None, not 0"),
        ({"timeout": -1.5}, "timeout must be a positive number"),
        ({"timeout": True}, "timeout must be a positive number"),
        ({"timeout": "5"}, "timeout must be a positive number"),
        ({"max_concurrency": 0}, "max_concurrency must be a positive int or None, not 0"),
        ({"max_concurrency": 1.5}, "max_concurrency must be a positive int"),
        ({"max_concurrency": True}, "max_concurrency must be a positive int"),
        ({"mailbox_size": 0}, "mailbox_size must be a positive int, not 0"),
        ({"mailbox_size": None}, "mailbox_size must be a positive int, not None"),
        ({"on_full": "drop"}, "on_full must be 'wait' or 'reject', not 'drop'"),
        ({"restart_on": [ValueError, 3]}, "restart_on must be a tuple of exception classes"),
        ({"restart_on": [int]}, "restart_on must be a tuple of exception classes"),
    ],
)
def test_bad_option_is_a_tool_definition_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):

        @tool(**options)
        def t(x: int) -> int:
            return x


def test_tool_definition_error_is_a_type_error() -> None:
    with pytest.raises(TypeError):

        @tool(timeout=0)
        def t(x: int) -> int:
            return x


def test_bad_tool_name_is_rejected_at_decoration() -> None:
    with pytest.raises(ValueError, match="is not accepted by every provider"):

        @tool(name="has space")
        def t(x: int) -> int:
            return x


# -- definitions that cannot be tools -----------------------------------------------------------


def test_var_positional_parameter_is_rejected() -> None:
    with pytest.raises(
        ToolDefinitionError, match=r"tool 't': \*items cannot be described to a model; name each"
    ):

        @tool
        def t(*items: int) -> int:
            return 0


def test_var_keyword_parameter_is_rejected() -> None:
    with pytest.raises(ToolDefinitionError, match=r"tool 't': \*\*options cannot be described to a model"):

        @tool
        def t(a: int, **options: int) -> int:
            return 0


def test_unannotated_parameter_is_rejected_naming_it() -> None:
    with pytest.raises(
        ToolDefinitionError, match=r"parameter 'b' has no type annotation; annotate it \(e\.g\. `b: str`\)"
    ):

        @tool
        def t(a: int, b) -> int:  # type: ignore[no-untyped-def]
            return 0


def test_a_sync_generator_is_rejected_naming_the_streaming_form() -> None:
    with pytest.raises(
        ToolDefinitionError, match=r"is a generator; a tool that yields .* `async def` generator"
    ):

        @tool
        def t(n: int) -> Any:
            yield n


def test_an_async_generator_is_a_streaming_tool_whose_result_is_text() -> None:
    @tool
    async def t(n: int) -> AsyncIterator[str]:
        yield str(n)

    assert t.streams
    assert t.is_async
    assert t.result_type is str  # its chunks joined
    assert t.descriptor.output is None  # as for any tool whose result is text


def test_type_msgspec_cannot_describe_is_rejected() -> None:
    class Opaque:
        pass

    with pytest.raises(ToolDefinitionError, match="cannot be described as JSON"):

        @tool
        def t(o: Opaque) -> int:
            return 0


def test_unresolvable_annotation_is_rejected() -> None:
    with pytest.raises(ToolDefinitionError, match="cannot resolve its type annotations"):

        @tool
        def t(o: "NoSuchType") -> int:  # type: ignore[name-defined]  # noqa: F821
            return 0


# -- CallContext ---------------------------------------------------------------------------


@tool
def whoami(prefix: str, ctx: CallContext, *, upper: bool = False) -> str:
    """Say which call this is."""
    text = f"{prefix}{ctx.call_id}:{ctx.tool_name}:{ctx.metadata.get('tenant')}"
    return text.upper() if upper else text


@tool
def keyword_ctx(n: int, *, ctx: CallContext) -> str:
    return f"{n}@{ctx.call_id}"


def test_call_context_is_not_in_the_schema() -> None:
    assert [p.name for p in whoami.descriptor.parameters] == ["prefix", "upper"]
    parameters = ToolRegistry([whoami]).schemas("jsonschema")[0]["parameters"]
    assert set(parameters["properties"]) == {"prefix", "upper"}
    assert parameters["required"] == ["prefix"]
    assert whoami.takes_context is True
    assert add.takes_context is False


def test_call_context_is_injected_positionally_and_by_keyword() -> None:
    ctx = CallContext("call-7", "whoami", ToolCallMetadata(tenant="acme"), deadline=12.5)
    assert whoami.dispatch(whoami.decode_args('{"prefix": ">", "upper": true}'), ctx) == ">CALL-7:WHOAMI:ACME"
    assert keyword_ctx.dispatch(keyword_ctx.decode_args('{"n": 4}'), ctx) == "4@call-7"


def test_call_context_cannot_be_forged_by_the_model() -> None:
    with pytest.raises(InvalidArguments, match=r"unknown field; the parameters are: prefix, upper") as info:
        whoami.decode_args('{"prefix": "x", "ctx": {"call_id": "forged"}}')
    assert info.value.path == "$.ctx"
    with pytest.raises(InvalidArguments) as info:
        keyword_ctx.decode_args({"n": 1, "ctx": "forged"})
    assert info.value.path == "$.ctx"


def test_call_context_defaults() -> None:
    ctx = CallContext("c", "t")
    assert ctx.metadata is ToolCallMetadata.EMPTY
    assert ctx.deadline is None
    assert "call_id='c'" in repr(ctx)


# -- decoding arguments ----------------------------------------------------------------------


class Position(msgspec.Struct):
    x: int
    y: int


@tool
def place(a: int, name: str = "n", p: Position | None = None, tags: list[str] = []) -> None:  # noqa: B006
    """Place something."""


def _invalid(raw: Any, t: Any = place) -> InvalidArguments:
    with pytest.raises(InvalidArguments) as info:
        t.decode_args(raw)
    return info.value


def test_missing_field_names_its_path() -> None:
    error = _invalid('{"name": "x"}')
    assert error.path == "$.a"
    assert error.expected == "required field is missing"
    assert str(error) == "required field is missing - at `$.a`"


def test_unknown_field_names_its_path_and_lists_the_parameters() -> None:
    error = _invalid('{"a": 1, "zz": 2}')
    assert error.path == "$.zz"
    assert error.expected == "unknown field; the parameters are: a, name, p, tags"


def test_wrong_type_names_the_path_and_the_expected_type() -> None:
    error = _invalid('{"a": "one"}')
    assert error.path == "$.a"
    assert error.expected == "Expected `int`, got `str`"


def test_nested_wrong_type_names_the_nested_path() -> None:
    error = _invalid('{"a": 1, "p": {"x": "left", "y": 2}}')
    assert error.path == "$.p.x"
    assert error.expected == "Expected `int`, got `str`"
    assert _invalid('{"a": 1, "p": {"x": 1}}').path == "$.p.y"
    assert _invalid('{"a": 1, "tags": ["ok", 3]}').path == "$.tags[1]"


def test_invalid_json_is_invalid_arguments_at_the_root() -> None:
    error = _invalid('{"a": 1,')
    assert error.path == "$"
    assert error.expected.startswith("arguments are not valid JSON (")
    assert error.expected.endswith("); send one JSON object")
    assert _invalid(b"\xff\xfe").path == "$"


@pytest.mark.parametrize(
    ("raw", "got"), [("[1, 2]", "array"), ("3", "int"), ('"text"', "str"), ("null", "null")]
)
def test_non_object_json_is_invalid_arguments(raw: str, got: str) -> None:
    error = _invalid(raw)
    assert error.path == "$"
    assert error.expected == f"Expected `object`, got `{got}`; the arguments must be one JSON object"


def test_non_mapping_python_value_is_invalid_arguments() -> None:
    assert _invalid([1, 2]).expected == "arguments must be a JSON object, got list"


@pytest.mark.parametrize("raw", ["", "   ", b"", "\n"])
def test_empty_string_is_treated_as_an_empty_object(raw: str | bytes) -> None:
    @tool
    def ping() -> str:
        return "pong"

    assert msgspec.structs.asdict(ping.decode_args(raw)) == {}
    assert _invalid(raw).path == "$.a"  # {} for a tool with a required parameter


def test_defaults_are_used_for_omitted_fields() -> None:
    args = place.decode_args('{"a": 1}')
    assert msgspec.structs.asdict(args) == {"a": 1, "name": "n", "p": None, "tags": []}


def test_null_for_a_defaulted_non_nullable_parameter_decodes_to_the_default() -> None:
    args = place.decode_args('{"a": 1, "name": null, "p": null, "tags": null}')
    assert msgspec.structs.asdict(args) == {"a": 1, "name": "n", "p": None, "tags": []}
    assert place.dispatch(args, None) is None


def test_schema_still_shows_the_declared_non_null_type() -> None:
    params = {p.name: p for p in place.descriptor.parameters}
    assert params["name"].type == String()
    assert params["tags"].type == Array(items=String())
    assert params["p"].type == Union(options=(params["p"].type.options[0], Null()))  # type: ignore[union-attr]


def test_null_for_a_required_non_nullable_parameter_is_still_invalid() -> None:
    error = _invalid('{"a": null}')
    assert error.path == "$.a"
    assert error.expected == "Expected `int`, got `null`"


def test_mutable_default_is_not_shared_between_calls() -> None:
    first = place.decode_args('{"a": 1}')
    first.tags.append("changed")
    assert place.decode_args('{"a": 1}').tags == []


def test_dict_arguments_decode_too() -> None:
    args = place.decode_args({"a": 1, "p": {"x": 2, "y": 3}})
    assert args.a == 1
    assert args.p == Position(x=2, y=3)
    error = _invalid({"a": 1, "p": {"x": "2", "y": 3}})
    assert error.path == "$.p.x"
    assert _invalid({"a": 1, "zz": 0}).path == "$.zz"


def test_bytes_arguments_decode() -> None:
    assert place.decode_args(b'{"a": 5}').a == 5


def test_strict_decoding_does_not_coerce_strings_to_numbers() -> None:
    assert _invalid('{"a": "5"}').expected == "Expected `int`, got `str`"
    assert _invalid({"a": "5"}).expected == "Expected `int`, got `str`"


def test_meta_constraints_are_enforced_when_decoding() -> None:
    @tool
    def page(size: Annotated[int, msgspec.Meta(ge=1, le=50), Description("page size")] = 10) -> int:
        return size

    error = _invalid('{"size": 0}', page)
    assert error.path == "$.size"
    assert error.expected == "Expected `int` >= 1"
    assert page.decode_args('{"size": null}').size == 10


def test_invalid_arguments_is_a_value_error() -> None:
    assert issubclass(InvalidArguments, ValueError)
    assert str(InvalidArguments("bad")) == "bad"


# -- class tools -----------------------------------------------------------------------------


class SearchArgs(msgspec.Struct):
    """Arguments for a search.

    Args:
        query: what to look for.
        limit: how many results.
    """

    query: str
    limit: int = 10


class SearchWeb(Tool[SearchArgs, list[str]]):
    """Search the web for pages.

    Args:
        limit: the class docstring beats the args docstring.
    """

    async def execute(self, args: SearchArgs) -> list[str]:
        return [f"{args.query}-{i}" for i in range(args.limit)]


@dataclasses.dataclass
class CopyArgs:
    """Copy a file."""

    source: str
    target: str
    overwrite: bool = False
    exclude: list[str] = dataclasses.field(default_factory=list)


class CopyFile(Tool[CopyArgs, bool]):
    name = "copy"
    timeout = 3.0
    max_concurrency = 2
    restart_on = (OSError,)

    def execute(self, args: CopyArgs) -> bool:  # type: ignore[override]
        return args.overwrite


class Person(TypedDict):
    name: str
    age: NotRequired[int]


class Greet(SimpleTool[Person]):
    description = "Greet a person."

    async def execute(self, args: Person) -> str:
        return f'  "hello" {args["name"]} ({args.get("age", "?")})\n'


def test_class_tool_name_defaults_to_snake_case_and_description_to_docstring() -> None:
    assert SearchWeb.name == "search_web"
    assert SearchWeb().name == "search_web"
    assert SearchWeb.descriptor.name == "search_web"
    assert SearchWeb.descriptor.description == "Search the web for pages."
    assert SearchWeb.args_type is SearchArgs
    assert SearchWeb.result_type == list[str]


def test_class_tool_parameter_docs_come_from_the_args_and_class_docstrings() -> None:
    params = {p.name: p for p in SearchWeb.descriptor.parameters}
    assert params["query"].description == "what to look for."
    assert params["limit"].description == "the class docstring beats the args docstring."


def test_args_docstring_is_the_description_when_the_class_has_none() -> None:
    assert CopyFile.name == "copy"
    assert CopyFile.descriptor.description == "Copy a file."


def test_class_attribute_description_beats_the_docstring() -> None:
    class Described(Tool[SearchArgs, str]):
        """Not this."""

        description = "This."

        async def execute(self, args: SearchArgs) -> str:
            return ""

    assert Described.descriptor.description == "This."


async def test_struct_args_class_tool_decodes_and_dispatches() -> None:
    search = SearchWeb()
    args = search.decode_args('{"query": "trio", "limit": 2}')
    assert args == SearchArgs(query="trio", limit=2)
    assert search.is_async is True
    assert search.takes_context is False
    assert await search.dispatch(args, None) == ["trio-0", "trio-1"]
    assert search.decode_args('{"query": "q", "limit": null}') == SearchArgs(query="q", limit=10)


def test_struct_args_class_tool_rejects_unknown_fields() -> None:
    error = _invalid('{"query": "q", "page": 2}', SearchWeb())
    assert error.path == "$.page"
    assert error.expected == "unknown field; the parameters are: query, limit"


def test_dataclass_args_class_tool() -> None:
    copy = CopyFile()
    args = copy.decode_args('{"source": "a", "target": "b", "exclude": null}')
    assert args == CopyArgs(source="a", target="b", overwrite=False, exclude=[])
    assert isinstance(args, CopyArgs)
    assert copy.is_async is False
    assert copy.dispatch(copy.decode_args({"source": "a", "target": "b", "overwrite": True}), None) is True
    assert [(p.name, p.required) for p in copy.descriptor.parameters] == [
        ("source", True),
        ("target", True),
        ("overwrite", False),
        ("exclude", False),
    ]
    assert (copy.timeout, copy.max_concurrency, copy.restart_on) == (3.0, 2, (OSError,))
    assert _invalid('{"source": "a"}', copy).path == "$.target"


async def test_typeddict_args_class_tool_leaves_not_required_keys_out() -> None:
    greet = Greet()
    assert greet.decode_args('{"name": "Ann"}') == {"name": "Ann"}
    assert greet.decode_args('{"name": "Ann", "age": 30}') == {"name": "Ann", "age": 30}
    assert [(p.name, p.required, p.type) for p in greet.descriptor.parameters] == [
        ("name", True, String()),
        ("age", False, Integer()),
    ]
    assert await greet.dispatch(greet.decode_args('{"name": "Ann"}'), None) == '  "hello" Ann (?)\n'
    assert _invalid('{"name": "Ann", "extra": 1}', greet).path == "$.extra"


def test_args_post_init_errors_are_invalid_arguments() -> None:
    class Bounded(msgspec.Struct):
        limit: int = 10

        def __post_init__(self) -> None:
            if self.limit < 0:
                raise ValueError("limit must be >= 0")

    @dataclasses.dataclass
    class BoundedDC:
        limit: int

        def __post_init__(self) -> None:
            if self.limit < 0:
                raise ValueError("limit must be >= 0")

    class T1(Tool[Bounded, int]):
        async def execute(self, args: Bounded) -> int:
            return args.limit

    class T2(Tool[BoundedDC, int]):
        async def execute(self, args: BoundedDC) -> int:
            return args.limit

    for t in (T1(), T2()):
        for raw in ('{"limit": -1}', {"limit": -1}):
            assert _invalid(raw, t).expected == "limit must be >= 0"


@pytest.mark.parametrize("args_type", [int, str, list[int], dict[str, int], int | None])
def test_non_object_args_type_is_a_definition_error_that_says_what_to_do(args_type: Any) -> None:
    with pytest.raises(
        ToolDefinitionError, match=r"its args type must be an object \(a msgspec Struct, a dataclass"
    ) as info:

        class Bad(Tool[args_type, str]):  # type: ignore[valid-type]
            async def execute(self, args: Any) -> str:
                return ""

    assert "wrap a single value in one, e.g. `class Args(msgspec.Struct): value: int`" in str(info.value)
    assert isinstance(info.value, TypeError)


def test_bad_class_option_is_a_definition_error_at_class_definition() -> None:
    with pytest.raises(ToolDefinitionError, match=r"tool class .*Slow: timeout must be a positive number"):

        class Slow(Tool[SearchArgs, str]):
            timeout = -1

    with pytest.raises(ToolDefinitionError, match="restart_on must be a tuple of exception classes"):

        class Restarts(Tool[SearchArgs, str]):
            restart_on = (OSError, "EOF")  # type: ignore[assignment]


def test_bad_class_tool_name_is_rejected_at_class_definition() -> None:
    with pytest.raises(ValueError, match="is not accepted by every provider"):

        class Spaced(Tool[SearchArgs, str]):
            name = "has space"


def test_generic_intermediate_class_is_built_by_its_concrete_subclass() -> None:
    A = TypeVar("A")

    class Logged(Tool[A, str]):
        pass

    assert "descriptor" not in vars(Logged)

    class Concrete(Logged[SearchArgs]):
        async def execute(self, args: SearchArgs) -> str:
            return args.query

    assert Concrete.args_type is SearchArgs
    assert [p.name for p in Concrete.descriptor.parameters] == ["query", "limit"]


# -- codec hooks -----------------------------------------------------------------------------


def test_default_codec_hooks() -> None:
    search = SearchWeb()
    assert search.encode_result(["a", "b"]) == b'["a","b"]'
    assert search.result_to_text(["a", "b"]) == '["a","b"]'
    assert search.result_to_text("verbatim ") == "verbatim "  # type: ignore[arg-type]
    assert search.result_to_parts(["a"]) == [TextPart(text='["a"]')]


def test_encode_result_handles_structs_and_pydantic_like_objects() -> None:
    class Model:
        def model_dump(self, mode: str) -> dict[str, Any]:
            return {"mode": mode}

    search = SearchWeb()
    assert search.encode_result(SearchArgs(query="q")) == b'{"query":"q","limit":10}'  # type: ignore[arg-type]
    assert search.encode_result(Model()) == b'{"mode":"json"}'  # type: ignore[arg-type]
    # What msgspec cannot encode is its str(), never an error after the call ran (issue 25, point 5).
    assert search.encode_result(object()).startswith(b'"<object object at 0x')  # type: ignore[arg-type]


def test_simple_tool_result_text_is_verbatim() -> None:
    greet = Greet()
    text = '  {"not": "re-encoded"}\n'
    assert greet.result_to_text(text) == text
    assert greet.result_to_parts(text) == [TextPart(text=text)]
    assert Greet.result_type is str


def test_overridden_result_to_text_feeds_result_to_parts() -> None:
    class Shout(Tool[SearchArgs, str]):
        async def execute(self, args: SearchArgs) -> str:
            return args.query

        def result_to_text(self, result: str) -> str:
            return result.upper()

    assert Shout().result_to_parts("hi") == [TextPart(text="HI")]


async def test_setup_and_teardown_exist_and_do_nothing_by_default() -> None:
    search = SearchWeb()
    assert await search.setup() is None
    assert await search.teardown() is None


async def test_tool_base_execute_receives_the_context() -> None:
    class WithContext(ToolBase[SearchArgs, str]):
        name = "with_context"

        async def execute(self, args: SearchArgs, ctx: CallContext) -> str:
            return f"{args.query}@{ctx.call_id}"

    t = WithContext()
    assert t.takes_context is True
    assert await t.dispatch(t.decode_args('{"query": "q"}'), CallContext("c9", "with_context")) == "q@c9"


async def test_execute_not_defined_raises_not_implemented() -> None:
    class Lazy(Tool[SearchArgs, str]):
        pass

    with pytest.raises(NotImplementedError, match="must define execute"):
        await Lazy().dispatch(SearchArgs(query="q"), None)


def test_overridden_decode_args_is_used() -> None:
    class Loose(Tool[SearchArgs, str]):
        def decode_args(self, raw: Any) -> SearchArgs:
            return SearchArgs(query=str(raw))

        async def execute(self, args: SearchArgs) -> str:
            return args.query

    assert Loose().decode_args("anything") == SearchArgs(query="anything")


# -- ToolSet ---------------------------------------------------------------------------------


class Files(ToolSet):
    def __init__(self, root: str) -> None:
        self.root = root

    @tool
    def read(self, path: str) -> str:
        """Read a file.

        Args:
            path: relative to the root.
        """
        return f"{self.root}/{path}"

    @tool(timeout=5)
    async def size(self, path: str) -> int:
        """Size of a file."""
        return len(self.root + path)

    @tool
    @staticmethod
    def join(a: str, b: str) -> str:
        """Join two paths."""
        return f"{a}/{b}"

    @tool
    @classmethod
    def kind(cls, path: str) -> str:
        """Which tool set this is."""
        return f"{cls.__name__}:{path}"

    def not_a_tool(self, x: int) -> int:
        return x


async def test_toolset_methods_become_bound_tools_of_the_instance() -> None:
    files = Files("/srv")
    tools = {t.name: t for t in files.tools()}
    assert list(tools) == ["read", "size", "join", "kind"]
    assert tools["read"].dispatch(tools["read"].decode_args('{"path": "a.txt"}'), None) == "/srv/a.txt"
    assert await tools["size"].dispatch(tools["size"].decode_args('{"path": "ab"}'), None) == 6
    assert tools["size"].timeout == 5


def test_toolset_method_schema_has_no_self() -> None:
    read = {t.name: t for t in Files("/").tools()}["read"]
    assert [(p.name, p.description) for p in read.descriptor.parameters] == [
        ("path", "relative to the root.")
    ]
    assert read.descriptor.description == "Read a file."


def test_toolset_staticmethod_keeps_its_first_parameter() -> None:
    join = {t.name: t for t in Files("/").tools()}["join"]
    assert [p.name for p in join.descriptor.parameters] == ["a", "b"]
    assert join.dispatch(join.decode_args('{"a": "x", "b": "y"}'), None) == "x/y"


def test_toolset_classmethod_is_bound_to_the_class() -> None:
    kind = {t.name: t for t in Files("/").tools()}["kind"]
    assert [p.name for p in kind.descriptor.parameters] == ["path"]
    assert kind.dispatch(kind.decode_args('{"path": "p"}'), None) == "Files:p"


def test_each_instance_gets_its_own_bound_tools() -> None:
    a, b = Files("/a"), Files("/b")
    assert a.read is a.read  # built once per instance
    assert a.read is not b.read
    assert a.read("x") == "/a/x"
    assert b.read("x") == "/b/x"


def test_unbound_method_tool_in_a_registry_is_a_definition_error() -> None:
    assert Files.read.is_unbound_method
    with pytest.raises(
        ToolDefinitionError, match=r"tool 'read' is a method reached through its class; register an instance"
    ):
        ToolRegistry([Files.read])
    assert "read" in ToolRegistry([Files("/").read])


class Base(ToolSet):
    @tool(name="find_items", timeout=7)
    def find(self, query: str, limit: int = 5) -> list[str]:
        """Find items.

        Args:
            query: what to find.
            limit: how many.
        """
        return []


class Derived(Base):
    def find(self, query, limit=3):  # type: ignore[no-untyped-def]
        return [query] * limit


class DerivedWithDoc(Base):
    def find(self, query: str, limit: int = 5) -> list[str]:
        """Find items my way.

        Args:
            query: a better description.
        """
        return [query.upper()]


def test_undecorated_override_of_a_tool_method_is_still_a_tool() -> None:
    (find,) = Derived().tools()
    assert find.name == "find_items"
    assert find.timeout == 7
    assert find.dispatch(find.decode_args('{"query": "q"}'), None) == ["q", "q", "q"]


def test_override_inherits_annotations_and_docstring_from_the_declaration() -> None:
    (find,) = Derived().tools()
    assert find.descriptor.description == "Find items."
    params = {p.name: p for p in find.descriptor.parameters}
    assert params["query"].type == String()
    assert params["query"].description == "what to find."
    assert params["limit"].type == Integer()
    assert params["limit"].default == 3  # the override's default
    assert _invalid('{"query": 1}', find).expected == "Expected `str`, got `int`"


def test_override_with_its_own_docstring_uses_it_and_fills_gaps_from_the_declaration() -> None:
    (find,) = DerivedWithDoc().tools()
    assert find.descriptor.description == "Find items my way."
    params = {p.name: p for p in find.descriptor.parameters}
    assert params["query"].description == "a better description."
    assert params["limit"].description == "how many."


class Searcher(Protocol):
    @tool
    def search(self, query: str) -> str:
        """Search a backend.

        Args:
            query: the search terms.
        """
        ...


class LocalSearch(ToolSet, Searcher):
    def __init__(self) -> None:
        self.index = {"trio": "structured concurrency"}

    def search(self, query: str) -> str:
        return self.index.get(query, "nothing")


def test_protocol_tool_declaration_is_inherited() -> None:
    (search,) = LocalSearch().tools()
    assert search.name == "search"
    assert search.descriptor.description == "Search a backend."
    assert search.descriptor.parameters[0].description == "the search terms."
    assert search.dispatch(search.decode_args('{"query": "trio"}'), None) == "structured concurrency"


def test_toolset_in_a_registry_registers_its_tools() -> None:
    registry = ToolRegistry([Files("/"), LocalSearch()])
    assert registry.names() == ["read", "size", "join", "kind", "search"]


# -- validate / fail -------------------------------------------------------------------------


def test_validate_passes_when_the_condition_holds() -> None:
    assert validate(True, "never shown") is None
    assert validate([1], "never shown") is None


def test_validate_raises_tool_rejected_with_the_message() -> None:
    with pytest.raises(ToolRejected, match=r"^limit must be positive$") as info:
        validate(0, "limit must be positive")
    assert info.value.message == "limit must be positive"


def test_fail_raises_tool_rejected_with_the_message() -> None:
    with pytest.raises(ToolRejected, match=r"^outside the sandbox$") as info:
        fail("outside the sandbox")
    assert info.value.message == "outside the sandbox"


def test_tool_rejected_is_not_a_value_error() -> None:
    assert not issubclass(ToolRejected, ValueError)  # a refusal, distinct from bad arguments


def test_tool_can_reject_its_input() -> None:
    @tool
    def divide(a: float, b: float) -> float:
        validate(b != 0, "b must not be zero")
        return a / b

    with pytest.raises(ToolRejected, match="b must not be zero"):
        divide.dispatch(divide.decode_args('{"a": 1, "b": 0}'), None)


def test_object_args_class_tool_schema_is_a_closed_object() -> None:
    parameters = ToolRegistry([SearchWeb()]).schemas("jsonschema")[0]["parameters"]
    assert parameters["additionalProperties"] is False
    assert parameters["required"] == ["query"]
    assert isinstance(SearchWeb.descriptor.parameters[0].type, String), (
        "the args Struct's fields are the tool's parameters, not one Object parameter"
    )
    assert not any(isinstance(p.type, Object) for p in SearchWeb.descriptor.parameters)


def test_an_optional_call_context_parameter_is_injected_too() -> None:
    @tool
    def who(name: str, ctx: CallContext | None = None) -> str:
        return f"{name}@{ctx.call_id if ctx else '-'}"

    assert [p.name for p in who.descriptor.parameters] == ["name"]
    assert who.takes_context
    assert who.dispatch(who.decode_args('{"name": "a"}'), CallContext("c9", "who")) == "a@c9"


def test_staticmethod_applied_over_tool_is_refused_with_the_order_to_use() -> None:
    class Tools(ToolSet):
        @staticmethod
        @tool
        def ping(x: int) -> int:
            return x

    with pytest.raises(ToolDefinitionError, match=r"put @tool above @staticmethod"):
        Tools().tools()


def test_a_defaulted_parameter_reports_its_declared_type_not_the_lenient_one() -> None:
    @tool
    def page(limit: int = 3) -> int:
        return limit

    with pytest.raises(InvalidArguments, match=r"^Expected `int`, got `str` - at `\$\.limit`$"):
        page.decode_args('{"limit": "ten"}')


async def test_result_value_chooses_what_the_success_carries_while_text_and_parts_come_from_the_result() -> (
    None
):
    from runtime import ToolCall, ToolDescriptor, open_runtime
    from runtime.messages import ImagePart

    class Reply(msgspec.Struct):
        text: str
        data: dict[str, int]

    class Rich(ToolBase[Any, Any], dynamic=True):
        name = "rich"
        descriptor = ToolDescriptor(name="rich")

        def decode_args(self, raw: Any) -> Any:
            return None

        async def execute(self, args: Any, ctx: CallContext) -> Reply:
            return Reply(text="two things", data={"n": 2})

        def result_to_text(self, result: Reply) -> str:
            return result.text

        def result_to_parts(self, result: Reply) -> list[Any]:
            return [ImagePart(data=b"png")]

        def result_value(self, result: Reply) -> Any:
            return result.data

    async with open_runtime([Rich()], tracing=False) as rt:
        result = await rt.call(ToolCall(id="1", name="rich"))
    assert result.ok
    assert (result.content, result.value, result.parts) == ("two things", {"n": 2}, (ImagePart(data=b"png"),))
