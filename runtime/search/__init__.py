"""Tool search: the model sees the few tools it needs among thousands, on every provider.

- `ToolIndex`: the index behind `ToolRegistry.search` (BM25F over names, descriptions,
  parameters and enum values), updated one tool at a time.
- `ToolSearch`: how `registry.schemas(provider, search=...)` defers tools and lets the model
  find them (Anthropic tool search and `tool_reference`, OpenAI `tool_search`, a local
  `search_tools` tool elsewhere); `ToolSearch.tool()` is the search tool to register.
- `FoundTools`: what a search call returns (its `ToolSuccess.value`), which the provider
  adapters send back in each provider's own form.
"""

from ._deferred import SEARCH_TOOL as SEARCH_TOOL
from ._deferred import FoundTools as FoundTools
from ._deferred import Namespace as Namespace
from ._deferred import SearchActivity as SearchActivity
from ._deferred import SearchArgs as SearchArgs
from ._deferred import SearchRequest as SearchRequest
from ._deferred import SearchTools as SearchTools
from ._deferred import ToolSearch as ToolSearch
from ._deferred import deferred_schemas as deferred_schemas
from ._deferred import found_text as found_text
from ._deferred import found_tools as found_tools
from ._deferred import tool_search_output as tool_search_output
from ._index import IndexStatistics as IndexStatistics
from ._index import ToolIndex as ToolIndex

__all__ = [
    "SEARCH_TOOL",
    "FoundTools",
    "IndexStatistics",
    "Namespace",
    "SearchActivity",
    "SearchArgs",
    "SearchRequest",
    "SearchTools",
    "ToolIndex",
    "ToolSearch",
    "deferred_schemas",
    "found_text",
    "found_tools",
    "tool_search_output",
]
