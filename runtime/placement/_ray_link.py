"""The runtime's link to Ray: the connection (`ensure_ray`) and ObjectRefs awaited from trio.

Ray's traps, handled here: `ray.init` runs on the main thread only (Ray's processes die with
the thread that started them), keeps the process's SIGTERM handler, and sends no worker logs
to the driver unless asked (`log_to_driver=True`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import trio

from .._extras import install_command
from ..exceptions import ToolDefinitionError

__all__ = ["ensure_ray", "ray_module", "stop_call", "wait_ref"]


def ray_module() -> Any:
    """The `ray` package, or a ToolDefinitionError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ToolDefinitionError(f"placement=Ray needs Ray: {install_command('ray')}") from exc
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

    Args:
        address: the cluster: `"auto"` (the one this machine belongs to, or `RAY_ADDRESS`),
            `"HOST:PORT"` (its head's GCS), `"ray://HOST:10001"` (Ray Client); None: a local
            Ray, started here.
        runtime_env: the job's runtime environment (`py_modules`, `working_dir`, `pip`,
            `env_vars`): what every replica of this process gets.
        log_to_driver: show the workers' output in this process.
        init_options: passed on to `ray.init` (`num_cpus`, `namespace`, ...).

    Raises:
        RuntimeError: Ray is not initialised and this is not the main thread.
    """
    ray = ray_module()
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
            runtime_env=_with_paths(runtime_env),
            log_to_driver=log_to_driver,
            **init_options,
        )
    finally:
        signal.signal(signal.SIGTERM, sigterm)  # ray.init installs its own handler


def _with_paths(runtime_env: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The env with imported packages in `py_modules` named by their folder (a single-file
    module by its file), as `ray.init` reads them: Ray Client (`ray://`) pickles the env, and a
    module does not pickle."""
    if runtime_env is None:
        return None
    env = dict(runtime_env)
    modules = env.get("py_modules")
    if isinstance(modules, list | tuple):
        env["py_modules"] = [_path_of(m) if isinstance(m, ModuleType) else m for m in modules]
    return env


def _path_of(module: ModuleType) -> Any:
    paths = list(getattr(module, "__path__", []))
    if len(paths) == 1:
        return paths[0]
    file = getattr(module, "__file__", None)
    return file if isinstance(file, str) and not paths else module  # else Ray says what is wrong


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
