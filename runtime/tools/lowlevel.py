"""The authoring layer's internal port: what the engine, the placements and MCP use of it.

Not for applications: these names follow the engine (as `trio.lowlevel`).
"""

from ._asking import Asker as Asker
from ._asking import elicitation_schema as elicitation_schema
from ._base import cannot_suspend as cannot_suspend
from ._base import function_code as function_code
from ._base import result_encoder as result_encoder
from ._base import run_to_end as run_to_end
from ._cancel import is_cancellation as is_cancellation
from ._cancel import reraise_own_cancellation as reraise_own_cancellation
from ._codec import ArgField as ArgField
from ._codec import ArgsCodec as ArgsCodec
from ._context import CallObserver as CallObserver
from ._context import asks_user as asks_user
from ._context import backgrounding as backgrounding
from ._context import check_tool_name as check_tool_name
from ._context import chunk_handler as chunk_handler
from ._context import durable_of as durable_of
from ._placement import PlacedTool as PlacedTool
from ._placement import PlacementHost as PlacementHost

__all__ = [
    "ArgField",
    "ArgsCodec",
    "Asker",
    "CallObserver",
    "PlacedTool",
    "PlacementHost",
    "asks_user",
    "backgrounding",
    "cannot_suspend",
    "check_tool_name",
    "chunk_handler",
    "durable_of",
    "elicitation_schema",
    "function_code",
    "is_cancellation",
    "reraise_own_cancellation",
    "result_encoder",
    "run_to_end",
]
