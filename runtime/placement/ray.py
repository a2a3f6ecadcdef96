"""`Ray`: a tool's calls run on Ray actors, on this machine or on a cluster (the `ray` extra).

    @tool(placement=Ray(replicas=2))            # a local Ray, started on first use
    @tool(placement=Ray(address="ray://head:10001", runtime_env={"py_modules": [...]}))

One Ray actor per replica (its `max_concurrency` is the tool's, default 1), created when the
tool's actor starts. Calls travel as the same msgspec messages as to a Subprocess worker
(MessagePack bytes in and out, the call's `traceparent` inside, so the span tree continues
on the Ray side). An ObjectRef is awaited without a thread: `ref.future()` with a done
callback that wakes the trio task through the trio token.

    the tool raises                      -> mapped like a local exception (it is boxed there)
    the replica dies (ActorDiedError...) -> ERROR for its in-flight calls; re-created after the
                                            restart backoff, counted toward the restart intensity
    a call's deadline passes / caller    -> that call alone is cancelled on its replica (Ray task
      cancels                               cancellation: the replica is an async actor, the tool's
                                            task is cancelled); a call that has not stopped within
                                            `cancel_grace` (a sync tool: a thread cannot be stopped)
                                            has its replica killed and re-created

Ray's traps, handled here: `ray.init` runs on the main thread only (Ray's processes die with
the thread that started them), keeps the process's SIGTERM handler, and sends no worker logs
to the driver unless asked (`log_to_driver=True`). Ray workers do not see this process's
`sys.path` edits: a replica adds them itself on a local Ray; on a cluster ship the code with
`runtime_env` (`py_modules` / `working_dir`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import trio

from ..exceptions import RemoteToolError, ToolDefinitionError, WorkerLost
from ..messages import ToolCall, ToolSuccess
from ..tools import CallContext, PlacedTool, Placement, PlacementHost, ToolBase
from ._pieces import reply_from_frames
from ._protocol import Done, Load, Raised, Ready, Request, decode_reply, encode, encode_request
from ._reference import main_path, reference
from ._subprocess import rebuild, trace_carrier

__all__ = ["Ray", "ensure_ray"]

log = logging.getLogger("runtime.placement")

_WHERE = "on Ray (placement=Ray)"


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ToolDefinitionError(
            "placement=Ray needs Ray: install the extra, `pip install 'tool-runtime[ray]'`"
        ) from exc
    return ray


def ensure_ray(
    address: str | None = None,
    *,
    runtime_env: Mapping[str, Any] | None = None,
    log_to_driver: bool = False,
    **init_options: Any,
) -> None:
    """Connect to Ray (start a local one when `address` is None) unless already connected.

    Call it on the main thread before the runtime opens if the runtime runs on another thread
    (`RuntimeThread`): Ray's processes die when the thread that started them exits.

    Raises:
        RuntimeError: Ray is not initialised and this is not the main thread.
    """
    ray = _ray()
    if ray.is_initialized():
        return
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "Ray must be initialised on the main thread (its processes die with the thread that "
            "started them): call runtime.placement.ray.ensure_ray() or ray.init() there before "
            "opening the runtime"
        )
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(
            address=address,
            runtime_env=dict(runtime_env) if runtime_env is not None else None,
            log_to_driver=log_to_driver,
            **init_options,
        )
    finally:
        signal.signal(signal.SIGTERM, sigterm)  # ray.init installs its own handler


async def wait_ref(ref: Any) -> Any:
    """The value of a Ray ObjectRef, awaited without a thread (the trio task sleeps until
    Ray's own callback thread wakes it through the trio token).

    Raises:
        whatever `ray.get(ref)` would raise.
    """
    future = ref.future()
    if not future.done():
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()

        def wake(_: Any) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        future.add_done_callback(wake)
        await done.wait()
    return future.result()


async def stop_call(ray: Any, ref: Any, grace: float) -> bool:
    """Cancel one call on its replica (`ray.cancel` of its ObjectRef) and wait up to `grace`
    seconds for it to end; the replica's other calls go on.

    Returns:
        True if it ended (cancelled, finished or failed), False if it still runs: only killing
        its replica stops it.
    """
    with contextlib.suppress(Exception):  # it may have just finished
        ray.cancel(ref)
    with trio.move_on_after(grace):
        with contextlib.suppress(Exception):  # TaskCancelledError, most likely
            await wait_ref(ref)
        return True
    return False


class Ray(Placement):
    """Run the tool on Ray actors (one per replica), locally or on a cluster.

    Args:
        replicas: Ray actors serving the tool; each serves `max_concurrency` calls at once
            (the tool's option, default 1).
        num_cpus: CPUs each replica reserves.
        num_gpus: GPUs each replica reserves.
        address: the Ray cluster (`"ray://head:10001"`, `"auto"`); None: a local Ray,
            started on first use unless one is already initialised.
        runtime_env: Ray runtime environment for the replicas (`py_modules`, `working_dir`,
            `pip`, `env_vars`); on a cluster, this is how the tool's code gets there.
        log_to_driver: show the replicas' output in this process (Ray's default is to; ours is not).
        stop_timeout: seconds a replica gets to run `teardown()` at shutdown.
        cancel_grace: seconds a cancelled call (a timeout, a caller gone) gets to stop on its
            replica before the replica is killed to stop it (its other calls fail then).
    """

    def __init__(
        self,
        replicas: int = 1,
        *,
        num_cpus: float = 1,
        num_gpus: float = 0,
        address: str | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        log_to_driver: bool = False,
        stop_timeout: float = 5.0,
        cancel_grace: float = 2.0,
    ) -> None:
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise ToolDefinitionError(f"Ray: replicas must be a positive int, not {replicas!r}")
        if isinstance(cancel_grace, bool) or not isinstance(cancel_grace, int | float) or cancel_grace < 0:
            raise ToolDefinitionError(
                f"Ray: cancel_grace must be a number of seconds >= 0, not {cancel_grace!r}"
            )
        self.replicas = replicas
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.address = address
        self.runtime_env = dict(runtime_env) if runtime_env is not None else None
        self.log_to_driver = log_to_driver
        self.stop_timeout = stop_timeout
        self.cancel_grace = cancel_grace

    def __repr__(self) -> str:
        return f"Ray(replicas={self.replicas}, num_cpus={self.num_cpus}, num_gpus={self.num_gpus}, address={self.address!r})"

    def check(self, tool: ToolBase[Any, Any]) -> None:
        _ray()
        reference(tool, _WHERE)

    def capacity(self, tool: ToolBase[Any, Any]) -> int:
        return self.replicas * (tool.options.max_concurrency or 1)

    def open(
        self, tool: ToolBase[Any, Any], host: PlacementHost
    ) -> contextlib.AbstractAsyncContextManager[PlacedTool]:
        return _open_replicas(self, tool, host)


class _Replica:
    __slots__ = ("handle", "in_flight", "killed", "name", "pid")

    def __init__(self, handle: Any, name: str, pid: int) -> None:
        self.handle = handle
        self.name = name
        self.pid = pid
        self.in_flight = 0
        self.killed = False  # killed on purpose (to stop a call): its other calls are not a loss


@contextlib.asynccontextmanager
async def _open_replicas(
    placement: Ray, tool: ToolBase[Any, Any], host: PlacementHost
) -> AsyncIterator[_Replicas]:
    replicas = _Replicas(placement, tool, host)
    async with trio.open_nursery() as nursery:
        replicas.nursery = nursery
        try:
            yield replicas
        finally:
            with trio.CancelScope(shield=True):
                await replicas.stop_all()
            nursery.cancel_scope.cancel()


class _Replicas:
    """The Ray actors of one tool actor's incarnation."""

    nursery: trio.Nursery

    def __init__(self, placement: Ray, tool: ToolBase[Any, Any], host: PlacementHost) -> None:
        self.ray = _ray()
        self.placement = placement
        self.name = tool.name
        self.host = host
        self.per_replica = tool.options.max_concurrency or 1
        local = placement.address is None
        self._load = encode(
            Load(
                ref=reference(tool, _WHERE),
                name=tool.name,
                sys_path=[p for p in sys.path if isinstance(p, str)] if local else [],
                main=main_path() if local else None,
            )
        )
        self.live: list[_Replica] = []
        self._changed = trio.Event()
        self.closing = False

    # -- replicas ----------------------------------------------------------------------

    async def start(self) -> None:
        ensure_ray(
            self.placement.address,
            runtime_env=self.placement.runtime_env,
            log_to_driver=self.placement.log_to_driver,
        )
        from ._ray_replica import Replica

        self._actor_class = self.ray.remote(Replica)
        failed: list[BaseException] = []

        async def one() -> None:
            try:
                await self.add_replica()
            except Exception as exc:
                failed.append(exc)

        async with trio.open_nursery() as starting:
            for _ in range(self.placement.replicas):
                starting.start_soon(one)
        if failed:
            raise failed[0]

    async def add_replica(self) -> None:
        name = f"{self.name}-{uuid.uuid4().hex[:12]}"
        placement = self.placement
        options: dict[str, Any] = {
            "name": name,
            "num_cpus": placement.num_cpus,
            "num_gpus": placement.num_gpus,
            "max_concurrency": self.per_replica,
            "max_restarts": 0,  # the runtime's supervisor decides about restarts, not Ray
        }
        if placement.runtime_env is not None:
            options["runtime_env"] = placement.runtime_env
        handle = self._actor_class.options(**options).remote(self._load)
        try:
            reply = decode_reply(await wait_ref(handle.ready.remote()))
        except BaseException:
            with contextlib.suppress(Exception):
                self.ray.kill(handle, no_restart=True)
            raise
        if isinstance(reply, Raised):
            with contextlib.suppress(Exception):
                self.ray.kill(handle, no_restart=True)
            exc = rebuild(reply)
            raise RemoteToolError("SetupFailed", f"setup() in its Ray replica raised {exc}") from exc
        assert isinstance(reply, Ready)
        self.live.append(_Replica(handle, name, reply.pid))
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    def _drop(self, replica: _Replica) -> None:
        if replica in self.live:
            self.live.remove(replica)

    async def _replace(self, delay: float) -> None:
        while not self.closing:
            await trio.sleep(delay)
            try:
                await self.add_replica()
                return
            except Exception as exc:
                log.warning("tool %r: a new Ray replica failed to start: %s", self.name, exc)
                next_delay = self.host.worker_lost(f"a new Ray replica failed to start: {exc}")
                if next_delay is None:
                    return
                delay = next_delay

    def _kill(self, replica: _Replica) -> None:
        """Kill a replica to stop a call for real; its replacement is not counted as a crash."""
        if replica.killed:
            return
        replica.killed = True
        self._drop(replica)
        with contextlib.suppress(Exception):
            self.ray.kill(replica.handle, no_restart=True)
        if not self.closing:
            self.nursery.start_soon(self._replace, 0.0)

    def _lost(self, replica: _Replica, why: str) -> None:
        if replica.killed or replica not in self.live:
            return  # already noticed by another of its calls, or killed on purpose
        self._drop(replica)
        if self.closing:
            return
        log.warning("tool %r: Ray replica %s (pid %d) died: %s", self.name, replica.name, replica.pid, why)
        delay = self.host.worker_lost(f"Ray replica {replica.name} (pid {replica.pid}) died")
        if delay is not None:
            self.nursery.start_soon(self._replace, delay)

    async def _stop_cancelled(self, replica: _Replica, ref: Any) -> None:
        """A cancelled call: cancelled alone on its replica; the replica is killed only if the
        call has not stopped within `cancel_grace`. Its slot stays taken until then."""
        try:
            if not await stop_call(self.ray, ref, self.placement.cancel_grace):
                log.warning(
                    "tool %r: a cancelled call on Ray replica %s did not stop within %g s: killing the replica",
                    self.name,
                    replica.name,
                    self.placement.cancel_grace,
                )
                self._kill(replica)
        finally:
            replica.in_flight -= 1
            self._wake()

    async def stop_all(self) -> None:
        self.closing = True
        replicas, self.live = list(self.live), []

        async def stop(replica: _Replica) -> None:
            with trio.move_on_after(self.placement.stop_timeout), contextlib.suppress(Exception):
                await wait_ref(replica.handle.stop.remote())
            with contextlib.suppress(Exception):
                self.ray.kill(replica.handle, no_restart=True)

        async with trio.open_nursery() as nursery:
            for replica in replicas:
                nursery.start_soon(stop, replica)

    # -- calls -------------------------------------------------------------------------

    async def _pick(self) -> _Replica:
        while True:
            free = [r for r in self.live if r.in_flight < self.per_replica]
            if free:
                return min(free, key=lambda r: r.in_flight)
            await self._changed.wait()

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
        replica = await self._pick()
        replica.in_flight += 1
        ref: Any = None
        stopping = False  # handed to _stop_cancelled, which lets go of the replica's slot
        try:
            ref = replica.handle.call.remote(request)
            answer = await wait_ref(ref)
        except (trio.Cancelled, BaseExceptionGroup):
            if ref is not None:  # stop that call alone, in the background: the caller goes now
                stopping = True
                self.nursery.start_soon(self._stop_cancelled, replica, ref)
            raise
        except Exception as exc:
            died = isinstance(
                exc, self.ray.exceptions.RayActorError | self.ray.exceptions.ActorUnavailableError
            )
            if not died:
                # A replica boxes the tool's own exceptions, so a RayTaskError here comes from the
                # replica's machinery; it is mapped like a local exception all the same.
                cause = (
                    getattr(exc, "cause", None) if isinstance(exc, self.ray.exceptions.RayTaskError) else None
                )
                raised = cause if isinstance(cause, BaseException) else exc
                text = str(raised).splitlines()[0] if str(raised) else ""
                raise RemoteToolError(type(raised).__name__, text) from exc
            if replica.killed:
                raise WorkerLost(
                    f"its Ray replica {replica.name} was killed to stop another call (a timeout or a "
                    "cancelled caller) while serving this call"
                ) from exc
            self._lost(replica, type(exc).__name__)
            raise WorkerLost(
                f"its Ray replica {replica.name} (pid {replica.pid}) died while serving this call "
                f"({type(exc).__name__})"
            ) from exc
        finally:
            if not stopping:
                replica.in_flight -= 1
                self._wake()
        reply = decode_reply(answer) if isinstance(answer, bytes) else await reply_from_frames(answer)
        if isinstance(reply, Done):
            return reply.result
        if isinstance(reply, Raised):
            raise rebuild(reply)
        raise RemoteToolError("ProtocolError", f"the replica answered {type(reply).__name__} to a call")
