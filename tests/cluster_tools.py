"""Plain functions the Ray cluster tests place on replicas (tests/test_placement_ray_cluster.py).

They are not tools here: each test makes its own tool from one, with the placement it tests
(`tool(cluster_tools.where, placement=Ray(...))`); a replica imports the function by reference.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import trio


def _node() -> str:
    import ray

    node: str = ray.get_runtime_context().get_node_id()
    return node


def _note(folder: str, name: str, text: str = "") -> None:
    """A file in `folder` (another process reads it: there is no event to share)."""
    Path(folder, name).write_text(text)


def _there(path: str) -> bool:
    return os.path.exists(path)


def where(seconds: float = 0.0) -> dict[str, object]:
    """Which replica (pid) on which Ray node served the call (after blocking `seconds`)."""
    if seconds:
        time.sleep(seconds)
    return {"pid": os.getpid(), "node": _node()}


async def nap(seconds: float) -> dict[str, object]:
    """Sleep on the replica's trio loop, then say where it ran."""
    await trio.sleep(seconds)
    return {"pid": os.getpid(), "node": _node()}


async def hold(gate: str, started: str = "") -> int:
    """Wait until the file `gate` exists (another process decides when); `started`: a folder
    where each call leaves a file as it begins."""
    if started:
        _note(started, f"{os.getpid()}-{time.monotonic_ns()}")
    while not _there(gate):  # noqa: ASYNC110 - another process makes the file
        await trio.sleep(0.01)
    return os.getpid()


async def slow_once(marker: str = "", notes: str = "") -> str:
    """The first call given `marker` sleeps (until cancelled); every other returns at once.

    In `notes` (a folder) the slow one writes `slow` with its pid when it begins and
    `cancelled` when it is cancelled.
    """
    if not marker:
        return "fast"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return "fast"
    os.close(fd)
    _note(notes, "slow", str(os.getpid()))
    try:
        await trio.sleep(600)
    except trio.Cancelled:
        _note(notes, "cancelled", str(os.getpid()))
        raise
    return "slow"
