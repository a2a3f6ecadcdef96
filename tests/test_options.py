"""Tool options are declared once: the keywords of `@tool` are the fields of `ToolOptions`."""

from __future__ import annotations

import typing

import pytest

from runtime.tools import ToolOptions
from runtime.tools._options import ToolOptionsKw


def test_the_tool_keywords_are_the_option_fields() -> None:
    assert tuple(typing.get_type_hints(ToolOptionsKw)) == ToolOptions.__struct_fields__


def test_options_built_directly_are_checked_too() -> None:
    with pytest.raises(ValueError, match="inline"):
        ToolOptions(inline=True, timeout=1.0)
    assert ToolOptions.build("t", {"timeout": 2}).timeout == 2.0  # an int is a number of seconds
