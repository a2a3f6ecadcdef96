"""`Ray`: a tool's calls run on Ray actors, on this machine or on a cluster (the `ray` extra).

    @tool(placement=Ray(replicas=2))            # a local Ray, started on first use
    @tool(placement=Ray(address="auto", runtime_env={"py_modules": [...]}))   # a cluster
    @tool(placement=Ray(min_replicas=1, max_replicas=8, max_queued=16, scheduling="spread"))

One Ray actor per replica (its `max_concurrency` is the tool's, default 1), created when the
tool's actor starts. Calls travel as the same msgspec messages as to a Subprocess worker
(MessagePack bytes in and out, the call's `traceparent` inside, so the span tree continues
on the Ray side). An ObjectRef is awaited without a thread: `ref.future()` with a done
callback that wakes the trio task through the trio token.

    the tool raises                      -> mapped like a local exception (it is boxed there)
    the replica dies (ActorDiedError...) -> ERROR for its in-flight calls; re-created after the
                                            restart backoff, counted toward the restart intensity
    its node leaves the cluster          -> UNAVAILABLE for its in-flight calls (an idempotent
                                            tool's Retry runs them again elsewhere); re-created
                                            at once on the nodes left, not counted as a crash
    more than `max_queued` per replica   -> OVERLOADED (Ray Serve's `max_queued_requests`)
      are waiting
    a call's deadline passes / caller    -> that call alone is cancelled on its replica (Ray task
      cancels                               cancellation: the replica is an async actor, the tool's
                                            task is cancelled); a call that has not stopped within
                                            `cancel_grace` (a sync tool: a thread cannot be stopped)
                                            has its replica killed and re-created

How the pool schedules, scales and hedges is in `_ray_pool` (how it starts, replaces and stops
replicas in `_pool`, shared with Subprocess); the autoscaling decision in `_autoscale`; hedging
in `_hedge`. Ray workers do not see this process's `sys.path` edits: a replica adds them itself
on a local Ray; on a cluster ship the code with `runtime_env` (`py_modules` / `working_dir`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import Any

from ..exceptions import ToolDefinitionError
from ..tools import Placement, ToolBase
from ..tools.lowlevel import PlacedTool, PlacementHost
from ._autoscale import Autoscaling
from ._hedge import Hedge
from ._pool import open_pool
from ._ray_link import ensure_ray, ray_module
from ._ray_options import NodeAffinity, RayOptions, Scheduling, build_options
from ._ray_pool import WHERE, RayReplicas
from ._reference import reference

__all__ = ["Autoscaling", "Hedge", "NodeAffinity", "Ray", "ensure_ray"]


class Ray(Placement):
    """Run the tool on Ray actors (one per replica), locally or on a cluster.

    Args:
        replicas: Ray actors serving the tool (with autoscaling: how many it starts with,
            default `min_replicas`); each serves `max_concurrency` calls at once (the tool's
            option, default 1).
        min_replicas: with `max_replicas`: the fewest replicas autoscaling keeps (default 1).
        max_replicas: autoscale between `min_replicas` and this, from the calls waiting and how
            long they wait (see `Autoscaling`); None: a fixed `replicas`.
        autoscaling: how fast it scales and what load it aims for (default `Autoscaling()`).
        max_queued: calls that may wait for a slot, per replica; one more is refused with
            OVERLOADED at once (Ray Serve's `max_queued_requests`). None: calls wait (the
            tool's mailbox bounds them, and its `on_full` decides).
        hedge: for an idempotent tool, send a call that has not answered within the delay to
            a second replica too (`Hedge`); the first answer wins, the other is cancelled.
        scheduling: where Ray places the replicas: "default" (Ray's own choice), "spread"
            (over as many nodes as it can: Ray's SPREAD strategy) or `NodeAffinity(...)`.
        resources: custom resources each replica reserves (`{"accelerator_a100": 1}`): only
            nodes that declare them free take a replica.
        num_cpus: CPUs each replica reserves.
        num_gpus: GPUs each replica reserves.
        address: the Ray cluster (`"auto"`, `"HOST:PORT"`, `"ray://head:10001"`); None: a local
            Ray, started on first use unless one is already initialised (a process has one
            Ray connection: the first placement to connect chooses it).
        runtime_env: Ray runtime environment for the replicas (`py_modules`, `working_dir`,
            `pip`, `env_vars`); on a cluster, this is how the tool's code gets there.
        log_to_driver: show the replicas' output in this process (Ray's default is to; ours is not).
        stop_timeout: seconds a replica gets to run `teardown()` at shutdown (or when drained).
        cancel_grace: seconds a cancelled call (a timeout, a caller gone) gets to stop on its
            replica before the replica is killed to stop it (its other calls fail then).

    Raises:
        ToolDefinitionError: an option it cannot honour (the message names it).
    """

    def __init__(
        self,
        replicas: int | None = None,
        *,
        min_replicas: int | None = None,
        max_replicas: int | None = None,
        autoscaling: Autoscaling | None = None,
        max_queued: int | None = None,
        hedge: Hedge | None = None,
        scheduling: Scheduling = "default",
        resources: Mapping[str, float] | None = None,
        num_cpus: float = 1,
        num_gpus: float = 0,
        address: str | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        log_to_driver: bool = False,
        stop_timeout: float = 5.0,
        cancel_grace: float = 2.0,
    ) -> None:
        if replicas is None:  # autoscaling starts at its floor
            replicas = min_replicas if type(min_replicas) is int and max_replicas is not None else 1
        self.options: RayOptions = build_options(
            {
                "replicas": replicas,
                "min_replicas": min_replicas,
                "max_replicas": max_replicas,
                "autoscaling": autoscaling,
                "max_queued": max_queued,
                "hedge": hedge,
                "scheduling": scheduling,
                "resources": dict(resources) if isinstance(resources, Mapping) else resources,
                "num_cpus": num_cpus,
                "num_gpus": num_gpus,
                "address": address,
                "runtime_env": dict(runtime_env) if isinstance(runtime_env, Mapping) else runtime_env,
                "log_to_driver": log_to_driver,
                "stop_timeout": stop_timeout,
                "cancel_grace": cancel_grace,
            }
        )
        o = self.options
        self.replicas = o.replicas
        self.num_cpus = o.num_cpus
        self.num_gpus = o.num_gpus
        self.address = o.address
        self.runtime_env = o.runtime_env
        self.log_to_driver = o.log_to_driver
        self.stop_timeout = o.stop_timeout
        self.cancel_grace = o.cancel_grace

    def __repr__(self) -> str:
        o = self.options
        text = f"Ray(replicas={o.replicas}, num_cpus={o.num_cpus:g}, num_gpus={o.num_gpus:g}, address={o.address!r}"
        if o.autoscaled:
            text += f", min_replicas={o.lowest}, max_replicas={o.highest}"
        for name in ("max_queued", "hedge", "resources"):
            value = getattr(o, name)
            if value:
                text += f", {name}={value!r}"
        if o.scheduling != "default":
            text += f", scheduling={o.scheduling!r}"
        return text + ")"

    def check(self, tool: ToolBase[Any, Any]) -> None:
        ray_module()
        reference(tool, WHERE)
        if self.options.hedge is not None and not tool.options.repeatable:
            raise ToolDefinitionError(
                f"tool {tool.name!r}: Ray(hedge=...) runs a slow call on a second replica too, which "
                "only an idempotent tool allows: say @tool(idempotent=True) (or read_only=True) if "
                "running it twice does what running it once does, or drop hedge="
            )

    def capacity(self, tool: ToolBase[Any, Any]) -> float:
        if self.options.max_queued is not None:
            return math.inf  # every call reaches the replicas' line, which refuses past its bound
        return self.options.highest * (tool.options.max_concurrency or 1)

    def open(
        self, tool: ToolBase[Any, Any], host: PlacementHost
    ) -> contextlib.AbstractAsyncContextManager[PlacedTool]:
        return open_pool(RayReplicas, self.options, tool, host)
