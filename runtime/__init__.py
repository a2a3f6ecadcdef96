"""tool-runtime: Python functions and typed classes as LLM tools, run as supervised trio actors.

Import name `runtime` (distribution `tool-runtime`). Tools run on trio; asyncio programs embed
the runtime with `runtime.embed` (on their own loop, or on a thread of its own).
The root only re-exports; see docs/ARCHITECTURE.md section 3 for the contract these names make.
`runtime.__version__` is the installed distribution's version (not in `__all__`, as in httpx).
"""

from ._version import __version__ as __version__
from .engine import Artifacts as Artifacts
from .engine import CallRequest as CallRequest
from .engine import DetachedCall as DetachedCall
from .engine import DetachedState as DetachedState
from .engine import DetachedStatus as DetachedStatus
from .engine import Durable as Durable
from .engine import Policy as Policy
from .engine import RestartPolicy as RestartPolicy
from .engine import Runtime as Runtime
from .engine import RuntimeOptions as RuntimeOptions
from .engine import open_runtime as open_runtime
from .exceptions import ArtifactMissing as ArtifactMissing
from .exceptions import CallDeferred as CallDeferred
from .exceptions import CallNotFound as CallNotFound
from .exceptions import CallStateError as CallStateError
from .exceptions import CannotAsk as CannotAsk
from .exceptions import InvalidArguments as InvalidArguments
from .exceptions import RuntimeClosed as RuntimeClosed
from .exceptions import SchemaError as SchemaError
from .exceptions import ToolDefinitionError as ToolDefinitionError
from .exceptions import ToolOverloaded as ToolOverloaded
from .exceptions import ToolRejected as ToolRejected
from .exceptions import ToolRuntimeError as ToolRuntimeError
from .exceptions import ToolUnavailable as ToolUnavailable
from .features import Feature as Feature
from .messages import TERMINATE_TOOL as TERMINATE_TOOL
from .messages import AudioPart as AudioPart
from .messages import ContentPart as ContentPart
from .messages import FailureKind as FailureKind
from .messages import ImagePart as ImagePart
from .messages import ResourceLinkPart as ResourceLinkPart
from .messages import ResourcePart as ResourcePart
from .messages import TextPart as TextPart
from .messages import ToolCall as ToolCall
from .messages import ToolCallMetadata as ToolCallMetadata
from .messages import ToolFailure as ToolFailure
from .messages import ToolPending as ToolPending
from .messages import ToolResult as ToolResult
from .messages import ToolSuccess as ToolSuccess
from .registry import ToolRegistry as ToolRegistry
from .schema import ToolDescriptor as ToolDescriptor
from .schema import ToolParameter as ToolParameter
from .tools import Answer as Answer
from .tools import Budget as Budget
from .tools import Cache as Cache
from .tools import CallContext as CallContext
from .tools import CircuitBreaker as CircuitBreaker
from .tools import Dedupe as Dedupe
from .tools import Description as Description
from .tools import Elicitation as Elicitation
from .tools import Elicited as Elicited
from .tools import RateLimit as RateLimit
from .tools import Retry as Retry
from .tools import Root as Root
from .tools import RootsRequest as RootsRequest
from .tools import Sampled as Sampled
from .tools import Sampling as Sampling
from .tools import SamplingMessage as SamplingMessage
from .tools import SimpleTool as SimpleTool
from .tools import Tool as Tool
from .tools import ToolBase as ToolBase
from .tools import ToolSet as ToolSet
from .tools import asking as asking
from .tools import fail as fail
from .tools import reporting as reporting
from .tools import tool as tool
from .tools import tools_of as tools_of
from .tools import validate as validate

__all__ = [
    "ArtifactMissing",
    "CallDeferred",
    "CallNotFound",
    "CallStateError",
    "DetachedCall",
    "DetachedState",
    "DetachedStatus",
    "Durable",
    "ToolPending",
    "Artifacts",
    "Budget",
    "Cache",
    "CircuitBreaker",
    "Dedupe",
    "RateLimit",
    "Retry",
    "asking",
    "SamplingMessage",
    "Sampling",
    "Sampled",
    "RootsRequest",
    "Root",
    "Elicited",
    "Elicitation",
    "CannotAsk",
    "Answer",
    "TERMINATE_TOOL",
    "AudioPart",
    "CallContext",
    "ContentPart",
    "Description",
    "FailureKind",
    "Feature",
    "ImagePart",
    "InvalidArguments",
    "ResourceLinkPart",
    "ResourcePart",
    "RestartPolicy",
    "CallRequest",
    "Policy",
    "RuntimeOptions",
    "Runtime",
    "RuntimeClosed",
    "SchemaError",
    "SimpleTool",
    "TextPart",
    "Tool",
    "ToolBase",
    "ToolCall",
    "ToolCallMetadata",
    "ToolDefinitionError",
    "ToolDescriptor",
    "ToolFailure",
    "ToolOverloaded",
    "ToolParameter",
    "ToolRegistry",
    "ToolRejected",
    "ToolResult",
    "ToolRuntimeError",
    "ToolSet",
    "ToolSuccess",
    "ToolUnavailable",
    "fail",
    "reporting",
    "open_runtime",
    "tool",
    "tools_of",
    "validate",
]
