"""Mistakes a newcomer makes, and the message that says how to fix each (issue 26)."""

from __future__ import annotations

import pytest

from runtime import ToolDefinitionError, ToolRegistry, open_runtime, tool


def search(query: str) -> str:
    return query


def shout(query: str) -> str:
    return query.upper()


def test_a_duplicate_name_in_a_registry_suggests_another_name() -> None:
    other = tool(name="search")(shout)
    with pytest.raises(ValueError, match=r"^Tool 'search' is already defined; ") as info:
        ToolRegistry([search, other])
    assert "@tool(name=...)" in str(info.value)
    assert "replace=True" not in str(info.value)  # a registry has no replace: a rename is the fix


def test_the_same_tool_listed_twice_says_so() -> None:
    found = tool(search)
    with pytest.raises(
        ValueError, match=r"^Tool 'search' is already defined: the same tool is listed twice$"
    ):
        ToolRegistry([found, found])


async def test_registering_a_taken_name_at_run_time_suggests_replace_true() -> None:
    async with open_runtime([search], tracing=False) as rt:
        with pytest.raises(ValueError, match=r"^Tool 'search' is already defined; pass replace=True"):
            await rt.register(tool(name="search")(shout))
        await rt.register(tool(name="search")(shout), replace=True)
        assert (await rt.invoke("search", query="a")).content == "A"


async def test_two_new_tools_of_one_name_at_run_time_suggest_a_rename_not_replace() -> None:
    async with open_runtime([], tracing=False) as rt:
        with pytest.raises(ValueError, match=r"^Tool 'twice' is already defined; give the new one") as info:
            await rt.register(tool(name="twice")(lambda: 1), tool(name="twice")(lambda: 2))
    assert "replace=True" not in str(info.value)


def test_a_misspelt_tool_option_suggests_the_option_meant() -> None:
    with pytest.raises(
        ToolDefinitionError,
        match=r"^tool 'slow': unknown option 'timout'; did you mean 'timeout'\? the options are: timeout, ",
    ):

        @tool(timout=5)
        def slow() -> None: ...


def test_an_unknown_option_far_from_every_option_lists_them_without_a_guess() -> None:
    with pytest.raises(ToolDefinitionError, match=r"unknown option 'colour'; the options are: timeout, "):

        @tool(colour="red")
        def paint() -> None: ...
