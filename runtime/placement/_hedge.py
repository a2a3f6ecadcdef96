"""Hedged calls (Dean and Barroso, "The Tail at Scale"): an idempotent tool's call that has
not answered within the delay is sent to a second replica as well; the first answer wins and
the other attempt is cancelled on its replica.

The delay is fixed (`Hedge(after=0.2)`) or the observed `quantile` (default p95) of the
tool's recent call times, so about one call in twenty is hedged and the extra load stays
near 5%. A hedge never waits: it is sent only if another replica has a free slot then.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import msgspec
import outcome
import trio

from ..exceptions import ToolUnavailable, WorkerLost

__all__ = ["Hedge", "HedgeCounts", "LatencyWindow", "race"]

R = TypeVar("R")
T = TypeVar("T")

Seconds = Annotated[float, msgspec.Meta(gt=0)]


class Hedge(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Send a slow call of an idempotent tool to a second replica (`Ray(hedge=Hedge())`).

    Attributes:
        after: seconds before the second attempt; None: the observed `quantile` of the tool's
            recent call times on its replicas.
        quantile: which call time is the delay when `after` is None (0.95: the p95).
        min_samples: calls timed before the observed delay is used (no hedging until then).
        window: recent call times kept for the quantile.
    """

    after: Seconds | None = None
    quantile: Annotated[float, msgspec.Meta(ge=0.5, lt=1)] = 0.95
    min_samples: Annotated[int, msgspec.Meta(ge=1)] = 20
    window: Annotated[int, msgspec.Meta(ge=10)] = 512


class LatencyWindow:
    """The last `window` call times and their `quantile`, sorted again every few samples (not
    per call: a hedge delay that lags by a few calls is as good)."""

    __slots__ = ("_cached", "_fresh", "_quantile", "_times", "min_samples")

    def __init__(self, hedge: Hedge) -> None:
        self._times: collections.deque[float] = collections.deque(maxlen=hedge.window)
        self._quantile = hedge.quantile
        self.min_samples = hedge.min_samples
        self._cached: float | None = None
        self._fresh = 0

    def add(self, seconds: float) -> None:
        self._times.append(seconds)
        self._fresh += 1

    def quantile(self) -> float | None:
        """The quantile of the recent times; None until `min_samples` were seen."""
        if len(self._times) < self.min_samples:
            return None
        if self._cached is None or self._fresh >= max(8, len(self._times) // 16):
            times = sorted(self._times)
            self._cached = times[min(len(times) - 1, math.ceil(self._quantile * len(times)) - 1)]
            self._fresh = 0
        return self._cached


class HedgeCounts:
    """What hedging did (for the tool's statistics)."""

    __slots__ = ("cancelled", "hedged", "wins")

    def __init__(self) -> None:
        self.hedged = 0  # second attempts sent
        self.wins = 0  # ... that answered first
        self.cancelled = 0  # attempts cancelled because the other answered


async def race(
    attempt: Callable[[R], Awaitable[T]],
    first: R,
    delay: float,
    second: Callable[[], R | None],
    counts: HedgeCounts,
) -> T:
    """`attempt(first)`, and after `delay` seconds `attempt(second())` too if `second()` gives a
    replica (it holds a slot there then); the first answer wins and the other attempt is
    cancelled (what `attempt` does when cancelled: stop it on its replica). An attempt lost
    with its replica (UNAVAILABLE, WorkerLost) is no answer while the other may still give one.
    """
    won: list[tuple[outcome.Outcome[T], bool]] = []
    running = 0

    async def one(replica: R, is_hedge: bool) -> None:
        nonlocal running
        try:
            result: outcome.Outcome[T] = outcome.Value(await attempt(replica))
        except Exception as exc:
            result = outcome.Error(exc)
        except BaseException:
            if won:  # cancelled because the other attempt answered
                counts.cancelled += 1
            raise
        running -= 1
        lost = isinstance(result, outcome.Error) and isinstance(result.error, ToolUnavailable | WorkerLost)
        if not won and not (lost and running):
            won.append((result, is_hedge))
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        running = 1
        nursery.start_soon(one, first, False)
        await trio.sleep(delay)
        hedge = second()
        if hedge is not None:
            counts.hedged += 1
            running += 1
            nursery.start_soon(one, hedge, True)
    result, is_hedge = won[0]
    if is_hedge:
        counts.wins += 1
    return result.unwrap()
