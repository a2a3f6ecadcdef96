"""The options of `Ray(...)`, declared once with their constraints and checked when the
placement is made: a bad value is a `ToolDefinitionError` naming the option, what it must be
and what it was, before any runtime opens (as `@tool` options are).

Scheduling maps onto Ray's own: `scheduling="spread"` is Ray's SPREAD strategy,
`NodeAffinity(...)` its `NodeAffinitySchedulingStrategy`, `resources=` the actor's custom
resources (a replica goes only to a node that has them free).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec

from ..exceptions import ToolDefinitionError
from ._autoscale import Autoscaling
from ._hedge import Hedge

__all__ = ["NodeAffinity", "RayOptions", "Scheduling", "build_options", "local_code"]

Count = Annotated[int, msgspec.Meta(ge=1)]
Amount = Annotated[float, msgspec.Meta(ge=0)]
_NODE_ID = re.compile(r"[0-9a-f]{16,}")
_BUILT_IN = frozenset({"CPU", "GPU", "memory", "object_store_memory"})


class NodeAffinity:
    """Place the replicas on these Ray nodes (Ray's `NodeAffinitySchedulingStrategy`), each new
    replica on the listed node that has the fewest of the tool's replicas (skipping nodes that
    replicas were lost with: a node that left the cluster never comes back under the same id).

    Args:
        *node_ids: Ray node ids, in hex (`ray.get_runtime_context().get_node_id()` in a task on
            that node, or `ray.nodes()`).
        soft: when none of the nodes can take a replica (gone, full), Ray may put it on another;
            if False it waits for one of them, and fails to start if none is alive.
    """

    __slots__ = ("node_ids", "soft")

    def __init__(self, *node_ids: str, soft: bool = False) -> None:
        if not node_ids:
            raise ToolDefinitionError("NodeAffinity: give at least one Ray node id")
        for node_id in node_ids:
            if not isinstance(node_id, str) or not _NODE_ID.fullmatch(node_id):
                raise ToolDefinitionError(
                    f"NodeAffinity: a node id is the hex string Ray gives (ray.nodes()[i]['NodeID']), "
                    f"not {node_id!r}"
                )
        if not isinstance(soft, bool):
            raise ToolDefinitionError(f"NodeAffinity: soft must be True or False, not {soft!r}")
        self.node_ids: tuple[str, ...] = tuple(node_ids)
        self.soft = soft

    def __repr__(self) -> str:
        ids = ", ".join(repr(n) for n in self.node_ids)
        return f"NodeAffinity({ids}, soft={self.soft})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodeAffinity) and (other.node_ids, other.soft) == (self.node_ids, self.soft)

    def __hash__(self) -> int:
        return hash((self.node_ids, self.soft))


Scheduling = Literal["default", "spread"] | NodeAffinity


class RayOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The checked options of one `Ray(...)` (see `Ray` for what each means)."""

    replicas: Count = 1
    min_replicas: Count | None = None
    max_replicas: Count | None = None
    autoscaling: Autoscaling | None = None
    max_queued: Annotated[int, msgspec.Meta(ge=0)] | None = None
    hedge: Hedge | None = None
    scheduling: Any = "default"
    resources: dict[str, Amount] = {}
    num_cpus: Amount = 1.0
    num_gpus: Amount = 0.0
    address: str | None = None
    runtime_env: dict[str, Any] | None = None
    log_to_driver: bool = False
    stop_timeout: Amount = 5.0
    cancel_grace: Amount = 2.0

    def __post_init__(self) -> None:
        # The checks msgspec's constraints cannot make; `_why` words them.
        if self.scheduling not in ("default", "spread") and not isinstance(self.scheduling, NodeAffinity):
            raise ValueError("scheduling")
        if self.max_replicas is None and (self.min_replicas is not None or self.autoscaling is not None):
            raise ValueError("autoscaling+max_replicas")
        low = self.min_replicas or 1
        if self.max_replicas is not None and not low <= self.replicas <= self.max_replicas:
            raise ValueError("replicas+bounds")
        if set(self.resources) & _BUILT_IN:
            raise ValueError("resources+built_in")

    @property
    def autoscaled(self) -> bool:
        return self.max_replicas is not None

    @property
    def lowest(self) -> int:
        return (self.min_replicas or 1) if self.autoscaled else self.replicas

    @property
    def highest(self) -> int:
        return self.max_replicas if self.max_replicas is not None else self.replicas


_EXPECTED = {
    "replicas": "a positive int",
    "min_replicas": "a positive int or None",
    "max_replicas": "a positive int or None",
    "autoscaling": "an Autoscaling(...) or None",
    "max_queued": "an int >= 0 (calls that may wait per replica) or None",
    "hedge": "a Hedge(...) or None",
    "scheduling": '"default", "spread" or a NodeAffinity(...)',
    "resources": "a dict of custom resource names to amounts >= 0",
    "num_cpus": "a number >= 0",
    "num_gpus": "a number >= 0",
    "address": 'None, "auto", "HOST:PORT" or "ray://HOST:PORT"',
    "runtime_env": "a dict (Ray's runtime_env) or None",
    "log_to_driver": "True or False",
    "stop_timeout": "a number of seconds >= 0",
    "cancel_grace": "a number of seconds >= 0",
}


def _objects(kind: Any, value: Any) -> Any:
    if kind in (Autoscaling, Hedge) and isinstance(value, kind):
        return value
    raise TypeError(f"Expected `{kind}`")


def build_options(values: dict[str, Any]) -> RayOptions:
    """The options, checked.

    Raises:
        ToolDefinitionError: a value the placement cannot honour, worded for the user.
    """
    fields = {name: value for name, value in values.items() if value is not None}
    try:
        return msgspec.convert(fields, RayOptions, dec_hook=_objects)
    except (msgspec.ValidationError, ValueError) as exc:
        raise ToolDefinitionError(f"Ray: {_why(fields, str(exc))}") from None


def local_code(runtime_env: dict[str, Any] | None) -> tuple[dict[str, Any] | None, list[str]]:
    """Split a runtime_env into what an actor may be given and the local code in it.

    Ray uploads local code (`py_modules` folders, files or imported packages, a `working_dir`
    folder) only for a whole job, at `ray.init`; an actor's own runtime_env may name only URIs.
    So the replicas get the env without its local code, which the job's env (given to
    `ray.init` when this placement connects) carries for them.

    Returns:
        (the env for the replicas, the local code it named, as text).
    """
    if runtime_env is None:
        return None, []
    env = dict(runtime_env)
    local: list[str] = []
    modules = env.get("py_modules")
    if isinstance(modules, list | tuple):
        kept = [m for m in modules if _uri(m)]
        local += [getattr(m, "__name__", None) or str(m) for m in modules if not _uri(m)]
        if kept:
            env["py_modules"] = kept
        else:
            del env["py_modules"]
    working_dir = env.get("working_dir")
    if working_dir is not None and not _uri(working_dir):
        local.append(str(working_dir))
        del env["working_dir"]
    return env, local


def _uri(entry: object) -> bool:
    return isinstance(entry, str) and "://" in entry


def _why(fields: dict[str, Any], text: str) -> str:
    if "autoscaling+max_replicas" in text:
        return (
            "min_replicas= and autoscaling= scale the replicas up to max_replicas=, which is missing; "
            "give max_replicas (or drop them for a fixed replicas=)"
        )
    if "replicas+bounds" in text:
        return (
            f"replicas={fields.get('replicas')!r} (the count it starts with) must lie between "
            f"min_replicas={fields.get('min_replicas', 1)!r} and max_replicas={fields.get('max_replicas')!r}"
        )
    if "resources+built_in" in text:
        built_in = sorted(set(fields.get("resources", {})) & _BUILT_IN)
        return (
            f"resources= names Ray's own {', '.join(built_in)}: give CPUs and GPUs as num_cpus= and "
            "num_gpus=; resources= is for a cluster's custom resources"
        )
    name = text.rpartition("at `$.")[2].split("`", 1)[0].split(".", 1)[0].split("[", 1)[0]
    if text.startswith("scheduling"):
        name = "scheduling"
    if name in _EXPECTED:
        return f"{name} must be {_EXPECTED[name]}, not {fields.get(name)!r}"
    return text  # pragma: no cover - every option has its sentence
