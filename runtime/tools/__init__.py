"""The authoring layer: functions and classes become tools."""

from ..exceptions import ToolRejected as ToolRejected
from ._base import SimpleTool as SimpleTool
from ._base import Tool as Tool
from ._base import ToolBase as ToolBase
from ._base import result_encoder as result_encoder
from ._codec import ArgField as ArgField
from ._codec import ArgsCodec as ArgsCodec
from ._context import LOG_LEVELS as LOG_LEVELS
from ._context import CallContext as CallContext
from ._context import Description as Description
from ._context import LogHandler as LogHandler
from ._context import ProgressHandler as ProgressHandler
from ._context import check_tool_name as check_tool_name
from ._context import fail as fail
from ._context import reporting as reporting
from ._context import validate as validate
from ._function import FunctionTool as FunctionTool
from ._function import tool as tool
from ._options import ToolOptions as ToolOptions
from ._placement import InProcess as InProcess
from ._placement import PlacedTool as PlacedTool
from ._placement import Placement as Placement
from ._placement import PlacementHost as PlacementHost
from ._toolset import ToolSet as ToolSet
