"""The engine: tool actors behind bounded mailboxes, a registry actor, a supervisor.

The path of one call through it is drawn in docs/ARCHITECTURE.md section 1.
"""

from ._actor import ActorState as ActorState
from ._config import RestartPolicy as RestartPolicy
from ._runtime import Runtime as Runtime
from ._runtime import open_runtime as open_runtime
from ._source import ToolRegistrar as ToolRegistrar
from ._source import ToolSource as ToolSource
from ._stats import RuntimeStatistics as RuntimeStatistics
from ._stats import ToolStatistics as ToolStatistics
