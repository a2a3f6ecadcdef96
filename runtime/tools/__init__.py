"""The authoring layer: functions and classes become tools.

What the engine, the placements and MCP need of it beyond that is `runtime.tools.lowlevel`.
"""

from ..exceptions import CannotAsk as CannotAsk
from ..exceptions import ToolRejected as ToolRejected
from ._asking import Answer as Answer
from ._asking import Elicitation as Elicitation
from ._asking import Elicited as Elicited
from ._asking import ElicitHandler as ElicitHandler
from ._asking import Root as Root
from ._asking import RootsHandler as RootsHandler
from ._asking import RootsRequest as RootsRequest
from ._asking import Sampled as Sampled
from ._asking import SampleHandler as SampleHandler
from ._asking import Sampling as Sampling
from ._asking import SamplingMessage as SamplingMessage
from ._asking import asking as asking
from ._base import SimpleTool as SimpleTool
from ._base import Tool as Tool
from ._base import ToolBase as ToolBase
from ._context import LOG_LEVELS as LOG_LEVELS
from ._context import CallContext as CallContext
from ._context import ChunkHandler as ChunkHandler
from ._context import Description as Description
from ._context import LogHandler as LogHandler
from ._context import ProgressHandler as ProgressHandler
from ._context import fail as fail
from ._context import reporting as reporting
from ._context import validate as validate
from ._function import FunctionTool as FunctionTool
from ._function import tool as tool
from ._options import ToolOptions as ToolOptions
from ._placement import InProcess as InProcess
from ._placement import Placement as Placement
from ._placement import PlacementStatistics as PlacementStatistics
from ._resilience import MAX_SECONDS as MAX_SECONDS
from ._resilience import NEVER_RETRIED as NEVER_RETRIED
from ._resilience import TRANSPORT as TRANSPORT
from ._resilience import Budget as Budget
from ._resilience import Cache as Cache
from ._resilience import CircuitBreaker as CircuitBreaker
from ._resilience import Dedupe as Dedupe
from ._resilience import RateLimit as RateLimit
from ._resilience import Retry as Retry
from ._resilience import RetryOn as RetryOn
from ._resilience import check_fields as check_fields
from ._toolset import ToolSet as ToolSet
from ._toolset import tools_of as tools_of

__all__ = [
    "Answer",
    "Budget",
    "Cache",
    "CallContext",
    "CannotAsk",
    "ChunkHandler",
    "CircuitBreaker",
    "Dedupe",
    "Description",
    "ElicitHandler",
    "Elicitation",
    "Elicited",
    "FunctionTool",
    "InProcess",
    "LOG_LEVELS",
    "LogHandler",
    "NEVER_RETRIED",
    "Placement",
    "PlacementStatistics",
    "ProgressHandler",
    "RateLimit",
    "Retry",
    "Root",
    "RootsHandler",
    "RootsRequest",
    "SampleHandler",
    "Sampled",
    "Sampling",
    "SamplingMessage",
    "SimpleTool",
    "TRANSPORT",
    "Tool",
    "ToolBase",
    "ToolOptions",
    "ToolRejected",
    "ToolSet",
    "asking",
    "fail",
    "reporting",
    "tool",
    "tools_of",
    "validate",
]
