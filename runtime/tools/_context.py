"""What a tool may ask for at call time, and how it refuses input."""

from __future__ import annotations

import re
from typing import Any, NoReturn

import msgspec

from ..exceptions import ToolRejected
from ..messages import TERMINATE_TOOL, ToolCallMetadata

__all__ = ["CallContext", "Description", "check_tool_name", "fail", "validate"]

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class CallContext:
    """Injected into a tool that declares a parameter of this type; never in the schema.

    Attributes:
        call_id: the id of the call being served.
        tool_name: the tool's name.
        metadata: the merged ToolCallMetadata (features < caller < runtime keys).
        deadline: the trio time by which the call must end, or None.
        tool: the tool serving the call (None for an unknown tool).
        error: the exception behind an ERROR failure, set by the engine (for logs and spans).
        abandoned: set by the engine when the call was answered while its work could not be
            stopped (it ignored cancellation, or its thread was blocked); shown on the span.
    """

    __slots__ = ("abandoned", "call_id", "deadline", "error", "metadata", "tool", "tool_name")

    def __init__(
        self,
        call_id: str,
        tool_name: str,
        metadata: ToolCallMetadata = ToolCallMetadata.EMPTY,
        deadline: float | None = None,
        tool: Any = None,
    ) -> None:
        self.call_id = call_id
        self.tool = tool
        self.tool_name = tool_name
        self.metadata = metadata
        self.deadline = deadline
        self.error: BaseException | None = None
        self.abandoned = False

    def __repr__(self) -> str:
        return (
            f"CallContext(call_id={self.call_id!r}, tool_name={self.tool_name!r}, "
            f"metadata={self.metadata!r}, deadline={self.deadline!r})"
        )


def Description(text: str) -> msgspec.Meta:
    """Describe a parameter to the model: `Annotated[int, Description("page size")]`.

    It is msgspec's own `Meta(description=...)`, so it works on nested Struct fields too.
    """
    return msgspec.Meta(description=text)


def validate(condition: object, message: str) -> None:
    """Refuse the input (REJECTED, `message` shown to the model) unless `condition` holds."""
    if not condition:
        raise ToolRejected(message)


def fail(message: str) -> NoReturn:
    """Refuse the input (REJECTED, `message` shown to the model)."""
    raise ToolRejected(message)


def check_tool_name(name: object) -> str:
    """Return `name` if every provider accepts it as a tool name.

    Raises:
        ValueError: the name is not `^[a-zA-Z0-9_-]{1,64}$`, or it is the reserved `__terminate__`.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):  # `$` would let a trailing "\n" through
        raise ValueError(
            f"tool name {name!r} is not accepted by every provider: use 1-64 characters "
            "from a-z, A-Z, 0-9, '_' and '-'"
        )
    if name == TERMINATE_TOOL:
        raise ValueError(f"tool name {TERMINATE_TOOL!r} is reserved for ending an agent loop")
    return name
