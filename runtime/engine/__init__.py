"""The engine: one entry, one call state machine, executors behind one protocol; tool actors
behind their mailboxes, a registry actor, a supervisor.

The path of one call through it is drawn in docs/ARCHITECTURE.md section 1.
"""

from ._actor import ActorState as ActorState
from ._artifact_tools import READ_TOOLS as READ_TOOLS
from ._artifacts import Artifacts as Artifacts
from ._detached import DetachedCall as DetachedCall
from ._journal import DetachedState as DetachedState
from ._journal import DetachedStatus as DetachedStatus
from ._open import open_runtime as open_runtime
from ._options import Durable as Durable
from ._options import RestartPolicy as RestartPolicy
from ._options import RuntimeOptions as RuntimeOptions
from ._policies import CallRequest as CallRequest
from ._policies import Policy as Policy
from ._runtime import CallSettings as CallSettings
from ._runtime import Runtime as Runtime
from ._runtime import ScopedRuntime as ScopedRuntime
from ._source import ToolRegistrar as ToolRegistrar
from ._source import ToolSource as ToolSource
from ._stats import RuntimeStatistics as RuntimeStatistics
from ._stats import ToolStatistics as ToolStatistics

__all__ = [
    "CallSettings",
    "ActorState",
    "Artifacts",
    "CallRequest",
    "DetachedCall",
    "DetachedState",
    "DetachedStatus",
    "Durable",
    "Policy",
    "RestartPolicy",
    "Runtime",
    "RuntimeOptions",
    "RuntimeStatistics",
    "ScopedRuntime",
    "ToolRegistrar",
    "ToolSource",
    "ToolStatistics",
    "open_runtime",
]
