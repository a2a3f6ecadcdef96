"""Runtime-wide settings every actor reads, and the restart policy of the supervisor."""

from __future__ import annotations

from typing import Any

import msgspec

from ..features import FeaturePipeline

__all__ = ["EngineConfig", "RestartPolicy"]


class RestartPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How the supervisor restarts a crashed tool actor (OTP restart intensity).

    Attributes:
        max_restarts: restarts allowed within `within` seconds; one more marks the tool down.
        within: the intensity period, in seconds.
        backoff: seconds before the first restart; doubles for each recent restart.
        max_backoff: the longest wait between restarts.
    """

    max_restarts: int = 3
    within: float = 5.0
    backoff: float = 0.1
    max_backoff: float = 5.0

    def delay(self, recent: int) -> float:
        """The wait before a restart when `recent` restarts happened within the period."""
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, recent - 1)))


class EngineConfig(msgspec.Struct, kw_only=True, frozen=True):
    """Runtime-wide settings every actor reads.

    Attributes:
        pipeline: the features' hooks.
        default_timeout: seconds a call may run when neither its tool nor its caller says.
        max_argument_bytes: larger arguments are INVALID_ARGUMENTS before decoding.
        max_argument_depth: arguments nested deeper are INVALID_ARGUMENTS before decoding.
        max_result_chars: every text that goes back (content, text parts, failures) is cut here.
        shutdown_timeout: seconds running calls get to finish at shutdown.
        thread_limit: worker threads of a sync tool that sets no `max_concurrency`.
        asyncio_loop: the host's asyncio loop, when the runtime runs on it as a trio guest
            (`runtime.embed.open_asyncio_runtime`); tools with `loop="asyncio"` run there.
    """

    pipeline: FeaturePipeline = msgspec.field(default_factory=FeaturePipeline)
    default_timeout: float | None = None
    max_argument_bytes: int = 1 << 20
    max_argument_depth: int = 64
    max_result_chars: int = 100_000
    shutdown_timeout: float = 5.0
    thread_limit: int = 40
    asyncio_loop: Any = None
