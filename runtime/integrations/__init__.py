"""The runtime under the agent frameworks people already use; each module is an optional extra.

- `runtime.integrations.openai_agents` (`tool-runtime[openai-agents]`): `function_tools(rt)`,
  the runtime's tools as the SDK's `FunctionTool`s; `OpenTelemetryTracingProcessor`.
- `runtime.integrations.pydantic_ai` (`tool-runtime[pydantic-ai]`): `RuntimeToolset(rt)`, a
  pydantic-ai toolset.
- `runtime.integrations.langchain` (`tool-runtime[langchain]`): `tools(rt)`, LangChain tools;
  `RuntimeToolNode(rt)`, a LangGraph-compatible tool node; `OpenTelemetryCallbackHandler`.

Every adapter takes a `Caller`: an object with the runtime's `registry` and awaitable `call` /
`call_many`, which is what asyncio code (every one of these frameworks) can use:

- an `AsyncioRuntime` (`runtime.embed.open_asyncio_runtime`, on the framework's event loop), or
  a scoped view of one, as it is;
- a `RuntimeThread`, through its `acall` / `acall_many` (and its blocking `call_many` for the
  frameworks' sync entry points, such as LangChain's `invoke`).

The same three rules hold in each: the model's arguments go to the runtime as the model wrote
them (the runtime decodes and validates them); a `ToolFailure` becomes the framework's own
tool-error form and no exception from a tool reaches the framework; the runtime's
`execute_tool` span nests under the framework's span for that call. `only=` / `exclude=` hide
tools: a hidden tool is never listed, and a call of one never reaches the runtime. `search=` (a
`runtime.search.ToolSearch`) offers a search tool and the always-loaded tools instead of
every tool past its threshold, the runtime's search loading what it finds (`_search`).

This package imports no framework: each module imports its own when it is imported.
"""

from ._caller import BlockingCaller as BlockingCaller
from ._caller import Caller as Caller
from ._caller import RuntimeLike as RuntimeLike
from ._caller import Selection as Selection
from ._caller import ToolCallFailed as ToolCallFailed
from ._caller import caller_of as caller_of

__all__ = ["BlockingCaller", "Caller", "RuntimeLike", "Selection", "ToolCallFailed", "caller_of"]
