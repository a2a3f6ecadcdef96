"""The engine: tool actors behind bounded mailboxes, a registry actor, a supervisor."""

from ._actor import ActorState as ActorState
from ._actor import RestartPolicy as RestartPolicy
from ._runtime import Runtime as Runtime
from ._runtime import RuntimeStatistics as RuntimeStatistics
from ._runtime import ToolStatistics as ToolStatistics
from ._runtime import open_runtime as open_runtime
from ._source import ToolRegistrar as ToolRegistrar
from ._source import ToolSource as ToolSource
