"""The Ray replicas of one tool actor's incarnation: who serves, who waits, who replaces whom.

    a call          takes a slot on the live replica with the fewest calls, or waits in line
                    for one (`_slots`); past `max_queued` per replica waiting: ToolOverloaded
    hedged          (`hedge=`, idempotent tools) no answer within the delay and another replica
                    has a free slot: the call is sent there too; the first answer wins and the
                    other attempt is cancelled on its replica
    the target      `replicas`, or the autoscaler's choice between `min_replicas` and
                    `max_replicas` (`_autoscale`); replicas are started or drained to meet it
                    (a drained replica finishes its calls, runs teardown(), then goes)

What a replica's end means for its calls and for the tool:

    its node left the cluster       ToolUnavailable (UNAVAILABLE: another attempt may work, so an
      (ActorDiedError "its node       idempotent tool's Retry runs it again on another replica);
      has died", or unreachable:      replaced at once on the nodes left, not counted as a crash
      ActorUnavailableError)
    its process died on its own     WorkerLost (ERROR, never retried: the tool may have done half
                                    its work); replaced after the restart backoff and counted
                                    toward the restart intensity (too many: the tool is down)
    killed to stop a cancelled call WorkerLost for its other calls; replaced at once, not counted
"""

from __future__ import annotations

import collections
import contextlib
import logging
import sys
import uuid
from typing import Any

import trio

from ..exceptions import RemoteToolError, ToolUnavailable, WorkerLost
from ..messages import ToolCall, ToolSuccess
from ..tools import CallContext, PlacementStatistics, ToolBase
from ..tools.lowlevel import PlacementHost
from ._autoscale import Autoscaling, LoadMeter, Scaler
from ._hedge import HedgeCounts, LatencyWindow, race
from ._pieces import reply_from_frames
from ._pool import ReplicaPool
from ._protocol import Done, Load, Raised, Ready, Request, decode_reply, encode, encode_request
from ._ray_link import ensure_ray, ray_module, stop_call, wait_ref
from ._ray_options import NodeAffinity, RayOptions, local_code
from ._reference import main_path, reference
from ._slots import Line
from ._subprocess import rebuild, trace_carrier

__all__ = ["RayReplicas"]

log = logging.getLogger("runtime.placement")

WHERE = "on Ray (placement=Ray)"


class _Replica:
    __slots__ = ("draining", "gone", "handle", "in_flight", "killed", "name", "node", "pid")

    def __init__(self, handle: Any, name: str, pid: int, node: str | None) -> None:
        self.handle = handle
        self.name = name
        self.pid = pid
        self.node = node
        self.in_flight = 0
        self.killed = False  # killed on purpose (to stop a call): its other calls are not a loss
        self.draining = False  # removed by the autoscaler: takes no new call, goes once idle
        self.gone: str | None = None  # "node" or "died" once lost: its other calls say the same


class RayReplicas(ReplicaPool[_Replica]):
    """The replicas of one tool actor's incarnation (the `PlacedTool` of a `Ray` placement)."""

    what = "Ray replica"

    def __init__(self, options: RayOptions, tool: ToolBase[Any, Any], host: PlacementHost) -> None:
        super().__init__(tool.name, host, options.replicas)
        self.ray = ray_module()
        self.options = options
        self.slots = tool.options.max_concurrency or 1
        local = options.address is None
        self._load = encode(
            Load(
                ref=reference(tool, WHERE),
                name=tool.name,
                sys_path=[p for p in sys.path if isinstance(p, str)] if local else [],
                main=main_path() if local else None,
            )
        )
        self.live: list[_Replica] = []
        self.draining: set[_Replica] = set()
        self._aimed: collections.Counter[str] = collections.Counter()  # NodeAffinity: starts per node
        self._lost_nodes: set[str] = set()  # nodes replicas were lost with (a node id never comes back)
        self.line: Line[_Replica] = Line(self.live, self.slots, options.max_queued, lambda: self.target)
        self._times = LatencyWindow(options.hedge) if options.hedge is not None else None
        self._env: dict[str, Any] | None = None
        self.lost_with_node = 0
        self.scaled_up = self.scaled_down = 0
        self.hedges = HedgeCounts()

    def statistics(self) -> PlacementStatistics:
        return PlacementStatistics(
            workers=len(self.live),
            target=self.target,
            starting=self.starting,
            queued=self.line.waiting,
            nodes=dict(collections.Counter(r.node for r in self.live if r.node is not None)),
            lost=self.lost,
            lost_with_node=self.lost_with_node,
            overloaded=self.line.overloaded,
            scaled_up=self.scaled_up,
            scaled_down=self.scaled_down,
            hedged=self.hedges.hedged,
            hedge_wins=self.hedges.wins,
            hedges_cancelled=self.hedges.cancelled,
        )

    # -- replicas ----------------------------------------------------------------------

    async def start(self) -> None:
        """Start `replicas` replicas together; then, if it autoscales, the autoscaler.

        Raises:
            the first reason a replica did not start (its setup's exception, rebuilt).
        """
        options = self.options
        connecting = not self.ray.is_initialized()
        self._env, local = local_code(options.runtime_env)
        if local and not connecting:
            raise RemoteToolError(
                "RuntimeEnvError",
                f"its runtime_env names local code ({', '.join(local)}), which Ray ships only for a "
                "whole job, when it connects; Ray was connected before this tool opened: give the "
                "runtime_env to runtime.placement.ray.ensure_ray() (or ray.init) instead, or name URIs",
            )
        ensure_ray(options.address, runtime_env=options.runtime_env, log_to_driver=options.log_to_driver)
        from ._ray_replica import Replica

        self._actor_class = self.ray.remote(Replica)
        await super().start()
        if options.autoscaled:
            self.line.meter = LoadMeter(trio.current_time())
            self.nursery.start_soon(self._autoscale, options.autoscaling or Autoscaling())

    def _actor_options(self, name: str) -> tuple[dict[str, Any], str | None]:
        """Ray's options for a new replica, and the node it is aimed at (NodeAffinity)."""
        options = self.options
        actor: dict[str, Any] = {
            "name": name,
            "num_cpus": options.num_cpus,
            "num_gpus": options.num_gpus,
            "max_concurrency": self.slots,
            "max_restarts": 0,  # the runtime decides about restarts, not Ray
        }
        if options.resources:
            actor["resources"] = dict(options.resources)
        if self._env:
            actor["runtime_env"] = self._env  # its local code is in the job's env
        scheduling = options.scheduling
        aimed = None
        if scheduling == "spread":
            actor["scheduling_strategy"] = "SPREAD"
        elif isinstance(scheduling, NodeAffinity):
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            serving = collections.Counter(r.node for r in self.live)
            nodes = [n for n in scheduling.node_ids if n not in self._lost_nodes] or scheduling.node_ids
            aimed = min(nodes, key=lambda n: serving[n] + self._aimed[n])
            actor["scheduling_strategy"] = NodeAffinitySchedulingStrategy(aimed, soft=scheduling.soft)
        return actor, aimed

    async def _start_one(self) -> None:
        """Start one replica and let it take calls.

        Raises:
            RemoteToolError: its setup raised; whatever Ray raised if it could not start.
        """
        name = f"{self.name}-{uuid.uuid4().hex[:12]}"
        actor, aimed = self._actor_options(name)
        if aimed is not None:
            self._aimed[aimed] += 1
        try:
            handle = self._actor_class.options(**actor).remote(self._load)
            try:
                reply = decode_reply(await wait_ref(handle.ready.remote()))
            except BaseException:
                with contextlib.suppress(Exception):
                    self.ray.kill(handle, no_restart=True)
                raise
        finally:
            if aimed is not None:
                self._aimed[aimed] -= 1
        if isinstance(reply, Raised):
            with contextlib.suppress(Exception):
                self.ray.kill(handle, no_restart=True)
            exc = rebuild(reply)
            raise RemoteToolError("SetupFailed", f"setup() in its Ray replica raised {exc}") from exc
        assert isinstance(reply, Ready)
        if self.closing:  # stop_all has run: this one would be left behind
            with contextlib.suppress(Exception):
                self.ray.kill(handle, no_restart=True)
            return
        self.live.append(_Replica(handle, name, reply.pid, reply.node))
        self.line.dispatch()
        self._reconcile()

    def _reconcile(self) -> None:
        """Start or drain replicas until those serving or starting are `target`."""
        if self.closing or self.down:
            return
        for _ in range(self.target - len(self.live) - self.starting):
            self._start()
        extra = len(self.live) - self.target  # replicas still starting are drained once they serve
        for replica in sorted(self.live, key=lambda r: r.in_flight)[: max(0, extra)]:
            self._drain(replica)

    def _drain(self, replica: _Replica) -> None:
        self.live.remove(replica)
        replica.draining = True
        self.draining.add(replica)
        self.scaled_down += 1
        self.nursery.start_soon(self._retire, replica)

    async def _retire(self, replica: _Replica) -> None:
        """A drained replica: once its calls are done, its teardown() runs and it goes."""
        while replica.in_flight:
            await self.line.idle.wait()
        self.draining.discard(replica)
        await self._stop_one(replica)

    async def _stop_one(self, replica: _Replica) -> None:
        with trio.move_on_after(self.options.stop_timeout), contextlib.suppress(Exception):
            await wait_ref(replica.handle.stop.remote())
        with contextlib.suppress(Exception):
            self.ray.kill(replica.handle, no_restart=True)

    def _drop(self, replica: _Replica) -> None:
        if replica in self.live:
            self.live.remove(replica)
        self.draining.discard(replica)

    def _kill(self, replica: _Replica) -> None:
        """Kill a replica to stop a call for real; its replacement is not counted as a crash."""
        if replica.killed:
            return
        replica.killed = True
        self._drop(replica)
        with contextlib.suppress(Exception):
            self.ray.kill(replica.handle, no_restart=True)
        self._reconcile()

    def _gone(self, replica: _Replica) -> bool:
        """Its process died on its own (`_lost`: counted, replaced after the restart backoff)."""
        if replica.gone is not None or replica.killed:
            return False  # already noticed by another of its calls, or killed on purpose
        replica.gone = "died"
        self._drop(replica)
        return True

    def _label(self, replica: _Replica) -> str:
        return f"Ray replica {replica.name} (pid {replica.pid})"

    def _lost_with_node(self, replica: _Replica, why: str) -> None:
        """Its node left the cluster (or cannot be reached): not the tool's doing, so not counted;
        replaced at once (Ray places the new one on a node that is left)."""
        if replica.gone is not None or replica.killed:
            return
        replica.gone = "node"
        if replica.node is not None:
            self._lost_nodes.add(replica.node)
        self._drop(replica)
        with contextlib.suppress(Exception):  # unreachable, maybe not dead: make sure it is
            self.ray.kill(replica.handle, no_restart=True)
        if self.closing:
            return
        self.lost_with_node += 1
        log.warning(
            "tool %r: Ray replica %s (pid %d) was lost with its node %s (%s); starting another",
            self.name,
            replica.name,
            replica.pid,
            replica.node,
            why,
        )
        self._reconcile()

    def _members(self) -> list[_Replica]:
        replicas = [*self.live, *self.draining]
        self.live.clear()  # the line reads this list
        self.draining.clear()
        return replicas

    # -- autoscaling -------------------------------------------------------------------

    async def _autoscale(self, policy: Autoscaling) -> None:
        options = self.options
        scaler = Scaler(policy, options.lowest, options.highest, self.slots)
        meter = self.line.meter
        assert meter is not None
        while True:
            await trio.sleep(policy.interval)
            now = trio.current_time()
            demand, wait = meter.take(now, self.line.waited_so_far(now))
            wanted = scaler.decide(now, self.target, demand, wait)
            if wanted == self.target or self.down:
                continue
            log.info(
                "tool %r: %d -> %d Ray replicas (%.1f calls in slots or waiting, p95 wait %.3fs)",
                self.name,
                self.target,
                wanted,
                demand,
                wait,
            )
            if wanted > self.target:
                self.scaled_up += wanted - self.target
            self.target = wanted
            self._reconcile()

    # -- calls -------------------------------------------------------------------------

    async def call(
        self, call: ToolCall, arguments: bytes, ctx: CallContext | None, timeout: float | None
    ) -> ToolSuccess[Any]:
        traceparent, tracestate = trace_carrier(ctx)
        request = encode_request(
            Request(
                call_id=call.id,
                arguments=arguments,
                metadata=dict(ctx.metadata) if ctx is not None else {},
                traceparent=traceparent,
                tracestate=tracestate,
                timeout=timeout,
            )
        )
        replica = await self.line.acquire("Ray replicas")
        if self._times is None:
            return await self._attempt(request, replica)
        return await self._hedged(request, replica)

    async def _attempt(self, request: bytes, replica: _Replica) -> ToolSuccess[Any]:
        """Serve the call on `replica`, whose slot it holds (and lets go of)."""
        ref: Any = None
        stopping = False  # handed to _stop_cancelled, which lets go of the replica's slot
        began = trio.current_time()
        try:
            ref = replica.handle.call.remote(request)
            answer = await wait_ref(ref)
        except (trio.Cancelled, BaseExceptionGroup):
            if ref is not None:  # stop that call alone, in the background: the caller goes now
                stopping = True
                self.nursery.start_soon(self._stop_cancelled, replica, ref)
            raise
        except Exception as exc:
            raise self._failure(replica, exc) from exc
        finally:
            if not stopping:
                self.line.release(replica)
        reply = decode_reply(answer) if isinstance(answer, bytes) else await reply_from_frames(answer)
        if isinstance(reply, Done):
            if self._times is not None:
                self._times.add(trio.current_time() - began)
            return reply.result
        if isinstance(reply, Raised):
            raise rebuild(reply)
        raise RemoteToolError("ProtocolError", f"the replica answered {type(reply).__name__} to a call")

    def _failure(self, replica: _Replica, exc: Exception) -> Exception:
        """What a call whose replica raised `exc` (Ray's, not the tool's) fails with."""
        errors = self.ray.exceptions
        if not isinstance(exc, errors.RayActorError):
            # A replica boxes the tool's own exceptions, so a RayTaskError here comes from the
            # replica's machinery; it is mapped like a local exception all the same.
            cause = getattr(exc, "cause", None) if isinstance(exc, errors.RayTaskError) else None
            raised = cause if isinstance(cause, BaseException) else exc
            text = str(raised).splitlines()[0] if str(raised) else ""
            return RemoteToolError(type(raised).__name__, text)
        if replica.killed:
            return WorkerLost(
                f"its Ray replica {replica.name} was killed to stop another call (a timeout or a "
                "cancelled caller) while serving this call"
            )
        if replica.gone is None:
            if isinstance(exc, errors.ActorUnavailableError) or _node_died(exc):
                self._lost_with_node(replica, type(exc).__name__)
            else:
                self._lost(replica, f"died ({type(exc).__name__})")
        if replica.gone == "node":
            return ToolUnavailable(
                f"its Ray replica {replica.name} was lost with its node ({type(exc).__name__}) while "
                "serving this call; another replica takes the next calls"
            )
        return WorkerLost(
            f"its Ray replica {replica.name} (pid {replica.pid}) died while serving this call "
            f"({type(exc).__name__})"
        )

    async def _stop_cancelled(self, replica: _Replica, ref: Any) -> None:
        """A cancelled call: cancelled alone on its replica; the replica is killed only if the
        call has not stopped within `cancel_grace`. Its slot stays taken until then."""
        try:
            if not await stop_call(self.ray, ref, self.options.cancel_grace):
                log.warning(
                    "tool %r: a cancelled call on Ray replica %s did not stop within %g s: killing the replica",
                    self.name,
                    replica.name,
                    self.options.cancel_grace,
                )
                self._kill(replica)
        finally:
            self.line.release(replica)

    async def _hedged(self, request: bytes, first: _Replica) -> ToolSuccess[Any]:
        """The call on `first`, and after the hedge delay on a second replica too (`_hedge`)."""
        hedge = self.options.hedge
        assert hedge is not None
        assert self._times is not None
        delay = hedge.after if hedge.after is not None else self._times.quantile()
        if delay is None:  # too few calls timed yet
            return await self._attempt(request, first)

        def second() -> _Replica | None:  # a hedge never waits in line
            replica = None if self.line.waiting else self.line.free(exclude=first)
            if replica is not None:
                self.line.take(replica)
            return replica

        return await race(lambda replica: self._attempt(request, replica), first, delay, second, self.hedges)


def _node_died(exc: BaseException) -> bool:
    """Ray says the actor died because its node did (drained, or its health checks failed)."""
    return "its node has died" in str(exc) or "node was terminated" in str(exc)
