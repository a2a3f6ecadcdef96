"""Tool search: find the few tools a request needs among thousands."""

from ._index import IndexStatistics as IndexStatistics
from ._index import ToolIndex as ToolIndex

__all__ = ["IndexStatistics", "ToolIndex"]
