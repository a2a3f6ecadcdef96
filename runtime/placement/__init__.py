"""Placement: where a tool's calls run (DESIGN.md 3.9).

    InProcess()                       the default: in the runtime's own tasks and threads
    Subprocess(workers=N, ...)        worker processes of the tool's own: crash isolation, real kills
    runtime.placement.ray.Ray(...)    Ray actors, on this machine or a cluster (the `ray` extra)

Give one as `@tool(placement=...)` or as a tool class's `placement` attribute. Tracing,
features, limits, failure kinds and statistics are the same whatever the placement.
"""

from ..tools import InProcess as InProcess
from ..tools import Placement as Placement
from ._subprocess import Subprocess as Subprocess

__all__ = ["InProcess", "Placement", "Subprocess"]


def __getattr__(name: str) -> object:
    # `from runtime.placement import Ray` works too; ray itself is imported only when a Ray
    # placement checks or opens a tool.
    if name == "Ray":
        from .ray import Ray

        return Ray
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
