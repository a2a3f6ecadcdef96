"""Issue 25, points 3 and 4 (an existing object's methods as tools, the object untouched), and from
issue 26: `@tool` keeps the signature for type checkers, and `@tool("name")` says to use `name=`."""

from __future__ import annotations

import copy
import gc
import pickle
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import pytest

from runtime import ToolCall, ToolDefinitionError, ToolRegistry, ToolSet, open_runtime, tool, tools_of


class TradingBot:
    """A plain class, as a benchmark's API classes are: nothing inherited, nothing decorated."""

    def __init__(self) -> None:
        self.orders: list[tuple[str, int]] = []

    def place_order(self, symbol: str, amount: int) -> str:
        """Place an order.

        Args:
            symbol: the stock symbol.
            amount: how many shares.
        """
        self.orders.append((symbol, amount))
        return f"{len(self.orders)}: {symbol} x{amount}"

    def order_count(self) -> int:
        """How many orders were placed."""
        return len(self.orders)

    @staticmethod
    def quote(symbol: str) -> float:
        """The price of a symbol."""
        return float(len(symbol))

    @classmethod
    def market(cls, region: str = "us") -> str:
        """Which market this bot trades on."""
        return f"{cls.__name__}:{region}"

    @property
    def busy(self) -> bool:
        return bool(self.orders)

    def _load_scenario(self, scenario: dict) -> None:  # type: ignore[type-arg]  # private: not a tool
        pass


class Files(ToolSet):
    def __init__(self, root: str) -> None:
        self.root = root

    @tool
    def read(self, path: str) -> str:
        """Read a file."""
        return f"{self.root}/{path}"


# -- 3. an existing object's methods ------------------------------------------------------------


def test_tool_of_a_bound_method_keeps_every_real_parameter() -> None:
    bot = TradingBot()
    place = tool(bot.place_order)
    assert [p.name for p in place.descriptor.parameters] == ["symbol", "amount"]
    assert place.descriptor.parameters[0].description == "the stock symbol."
    assert "place_order" in ToolRegistry([place])  # not refused as "reached through its class"


async def test_tools_of_makes_every_public_method_a_tool_bound_to_the_object() -> None:
    bot = TradingBot()
    tools = tools_of(bot)
    assert [t.name for t in tools] == ["place_order", "order_count", "quote", "market"]
    async with open_runtime(ToolRegistry(tools), tracing=False) as rt:
        results = [
            await rt.call(ToolCall(id="c1", name="place_order", arguments='{"symbol": "ACME", "amount": 3}')),
            await rt.call(ToolCall(id="c2", name="place_order", arguments={"symbol": "XYZ", "amount": 1})),
            await rt.call(ToolCall(id="c3", name="order_count")),
            await rt.call(ToolCall(id="c4", name="quote", arguments='{"symbol": "ACME"}')),
            await rt.call(ToolCall(id="c5", name="market")),
        ]
    assert [r.content for r in results] == ["1: ACME x3", "2: XYZ x1", "2", "4.0", "TradingBot:us"]
    assert bot.orders == [("ACME", 3), ("XYZ", 1)]  # the calls worked on the object itself


def test_tools_of_leaves_the_object_untouched_copyable_and_picklable() -> None:
    bot = TradingBot()
    before = dict(vars(bot))
    tools = tools_of(bot)
    tools[0].dispatch(tools[0].decode_args('{"symbol": "A", "amount": 1}'), None)
    assert set(vars(bot)) == set(before)
    assert copy.deepcopy(bot).orders == [("A", 1)]
    assert pickle.loads(pickle.dumps(bot)).orders == [("A", 1)]


def test_tools_of_picks_and_leaves_out_methods_by_name() -> None:
    bot = TradingBot()
    assert [t.name for t in tools_of(bot, include=["quote", "order_count"])] == ["quote", "order_count"]
    assert [t.name for t in tools_of(bot, exclude=["market"])] == ["place_order", "order_count", "quote"]
    assert all(t.timeout == 3 for t in tools_of(bot, timeout=3))
    with pytest.raises(ToolDefinitionError, match=r"TradingBot has no public method 'nope'"):
        tools_of(bot, include=["nope"])


def test_tools_of_names_a_method_that_cannot_be_a_tool_and_how_to_leave_it_out() -> None:
    class Loose:
        def fine(self, x: int) -> int:
            return x

        def untyped(self, x):  # type: ignore[no-untyped-def]
            return x

    with pytest.raises(
        ToolDefinitionError, match=r"Loose\.untyped cannot be a tool: .*exclude=\['untyped'\]"
    ):
        tools_of(Loose())
    assert [t.name for t in tools_of(Loose(), exclude=["untyped"])] == ["fine"]


def test_tools_of_a_tool_set_binds_its_declared_tools() -> None:
    files = Files("/srv")
    (read,) = tools_of(files)
    assert read.dispatch(read.decode_args('{"path": "a"}'), None) == "/srv/a"


# -- 4. ToolSet.tools() writes nothing into the instance ------------------------------------------


def test_tool_set_tools_leave_the_instance_copyable_and_picklable() -> None:
    files = Files("/srv")
    before = dict(vars(files))
    (read,) = files.tools()
    assert files.read is read  # still one bound tool per instance while it is in use
    assert vars(files) == before  # ... kept outside the instance
    copied = copy.deepcopy(files)
    assert copied.root == "/srv"
    assert pickle.loads(pickle.dumps(files)).root == "/srv"
    assert copied.read("x") == "/srv/x"
    assert copied.read is not files.read


def test_the_tools_themselves_deep_copy_with_their_object() -> None:
    files = Files("/srv")
    (read,) = files.tools()
    read.result_presenter()  # its codecs made: they hold msgspec decoders, which cannot be copied
    copied = copy.deepcopy(read)
    assert copied.dispatch(copied.decode_args('{"path": "a"}'), None) == "/srv/a"
    assert copied.fn.__self__ is not files  # the copy is bound to a copy of the object


def test_bound_tools_do_not_keep_their_instance_alive() -> None:
    files = Files("/tmp")
    files.tools()
    _ = files.read
    gone = weakref.ref(files)
    del files, _
    gc.collect()
    assert gone() is None


# -- issue 26: the signature for type checkers, and `@tool("name")` -------------------------------


def test_a_name_given_positionally_is_refused_with_the_keyword_to_use() -> None:
    with pytest.raises(
        ToolDefinitionError,
        match=r"""@tool\('search'\): give the tool's name as a keyword, `@tool\(name='search'\)`""",
    ):

        @tool("search")  # type: ignore[call-overload]
        def find(q: str) -> str:
            return q


SNIPPET = """
from runtime import tool, ToolSet


@tool
def add(a: int, b: int = 2) -> int:
    return a + b


@tool(timeout=5)
async def fetch(url: str) -> bytes:
    return b""


class Files(ToolSet):
    @tool
    def read(self, path: str) -> str:
        return path


total: int = add(1) + add(1, b=3)
reveal_type(add)
reveal_type(fetch)
reveal_type(Files().read)
text: str = Files().read("a")
add("one")
Files().read(1)
"""


def test_tool_keeps_the_signature_for_type_checkers(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(textwrap.dedent(SNIPPET))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--follow-imports=silent",
            str(snippet),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parent.parent,
    )
    lines = [line.split(": ", 1)[1] for line in run.stdout.splitlines() if line.startswith(str(snippet))]
    revealed = [line.removeprefix("note: Revealed type is ") for line in lines if "Revealed" in line]
    assert revealed == [
        '"runtime.tools._function.FunctionTool[[a: int, b: int =], int]"',
        '"runtime.tools._function.FunctionTool[[url: str], typing.Coroutine[Any, Any, bytes]]"',
        '"runtime.tools._function.FunctionTool[[path: str], str]"',  # read from an instance: no self
    ]
    errors = [line for line in lines if line.startswith("error")]
    # Exactly the two wrong calls: had the signature been erased, neither would be an error.
    assert len(errors) == 2, run.stdout
    assert (
        'Argument 1 to "__call__" of "FunctionTool" has incompatible type "str"; expected "int"' in errors[0]
    )
    assert (
        'Argument 1 to "__call__" of "FunctionTool" has incompatible type "int"; expected "str"' in errors[1]
    )


RESULT_SNIPPET = """
import msgspec
from runtime import Tool, ToolSuccess, open_runtime, tool


@tool
def add(a: int, b: int) -> int:
    return a + b


@tool
async def fetch(url: str) -> bytes:
    return b""


class Text(msgspec.Struct):
    text: str


class Echo(Tool[Text, str]):
    name = "echo"
    description = "Echo."

    async def execute(self, args: Text) -> str:
        return args.text


async def main() -> None:
    async with open_runtime([add, fetch, Echo()]) as rt:
        summed = await rt.invoke(add, a=1, b=2)
        if isinstance(summed, ToolSuccess):
            reveal_type(summed.value)
        fetched = await rt.invoke(fetch, url="x")
        if isinstance(fetched, ToolSuccess):
            reveal_type(fetched.value)
        echoed = await rt.invoke(Echo(), text="hi")
        if isinstance(echoed, ToolSuccess):
            reveal_type(echoed.value)
        named = await rt.invoke("add", a=1, b=2)
        if isinstance(named, ToolSuccess):
            reveal_type(named.value)
"""


def test_invoke_of_a_tool_object_types_the_success_value(tmp_path: Path) -> None:
    snippet = tmp_path / "results.py"
    snippet.write_text(RESULT_SNIPPET)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--follow-imports=silent",
            str(snippet),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parent.parent,
    )
    lines = [line.split(": ", 1)[1] for line in run.stdout.splitlines() if line.startswith(str(snippet))]
    revealed = [line.removeprefix("note: Revealed type is ") for line in lines if "Revealed" in line]
    assert revealed == ['"int"', '"bytes"', '"str"', '"Any"'], run.stdout
    assert not [line for line in lines if line.startswith("error")], run.stdout
