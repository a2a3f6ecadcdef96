"""Autoscaling a placed tool's replicas: the policy (`Autoscaling`), what is measured
(`LoadMeter`) and the decision (`Scaler`), kept apart from Ray so that the decision is a pure
function of what it is shown and the time (tested on a virtual clock).

Every `interval` seconds the pool shows the scaler two things about the interval that ended:

    demand    the calls holding a replica's slot or waiting for one, averaged over time
              (queue depth included: Little's law makes it arrival rate x latency)
    wait p95  the 95th percentile of how long calls waited for a slot (the latency a caller
              pays for too few replicas), counting calls still waiting

    wanted = ceil(demand / (slots per replica x target)), one more if wait p95 > max_wait,
             within [min_replicas, max_replicas]

Hysteresis: more replicas must be wanted without a break for `upscale_delay` before any is
added (then as many as the last interval wants), fewer for `downscale_delay` before any is
removed (then down to the most wanted during that time), so a burst or a lull shorter than
the delays changes nothing, and the count does not flap at a boundary.
"""

from __future__ import annotations

import math
from typing import Annotated

import msgspec

__all__ = ["Autoscaling", "LoadMeter", "Scaler"]

Positive = Annotated[float, msgspec.Meta(gt=0)]
Seconds = Annotated[float, msgspec.Meta(ge=0)]


class Autoscaling(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How `Ray(min_replicas=, max_replicas=)` moves the replica count between its bounds.

    Attributes:
        target: calls in flight per replica slot it aims for (Ray Serve's
            `target_ongoing_requests`, per slot of the tool's `max_concurrency`); 1.0: every
            slot busy and nobody waiting.
        max_wait: seconds; when the 95th percentile of the time calls waited for a replica
            over an interval is longer, one more replica is wanted, whatever the average says.
        interval: seconds between two looks at the load.
        upscale_delay: seconds more replicas must be wanted without a break before they are added.
        downscale_delay: seconds fewer replicas must be wanted without a break before one is
            removed (a removed replica finishes its calls first).
    """

    target: Positive = 1.0
    max_wait: Seconds = 0.1
    interval: Positive = 0.5
    upscale_delay: Seconds = 1.0
    downscale_delay: Seconds = 30.0


class Scaler:
    """The replica count a tool wants, from the load of each interval (see the module docstring).

    Args:
        policy: the tool's `Autoscaling`.
        lowest: `min_replicas`.
        highest: `max_replicas`.
        slots: calls one replica serves at once (the tool's `max_concurrency`, default 1).
    """

    def __init__(self, policy: Autoscaling, lowest: int, highest: int, slots: int) -> None:
        self.policy = policy
        self.lowest = lowest
        self.highest = highest
        self.slots = slots
        self._up_since: float | None = None
        self._down_since: float | None = None
        self._down_peak = 0

    def wanted(self, current: int, demand: float, wait_p95: float) -> int:
        """The count this interval's load asks for, within the bounds (no hysteresis)."""
        want = math.ceil(demand / (self.slots * self.policy.target) - 1e-9)
        if wait_p95 > self.policy.max_wait:
            want = max(want, current + 1)
        return min(self.highest, max(self.lowest, want))

    def decide(self, now: float, current: int, demand: float, wait_p95: float) -> int:
        """The replica count to have from now on (`current` when nothing changes).

        Args:
            now: the time (any clock, in seconds).
            current: replicas serving or starting.
            demand: calls in slots or waiting, averaged over the interval.
            wait_p95: seconds, the 95th percentile of the waits for a slot in the interval.
        """
        want = self.wanted(current, demand, wait_p95)
        if want > current:
            self._down_since = None
            if self._up_since is None:
                self._up_since = now
            if now - self._up_since >= self.policy.upscale_delay:
                self._up_since = None
                return want
        elif want < current:
            self._up_since = None
            if self._down_since is None:
                self._down_since, self._down_peak = now, want
            self._down_peak = max(self._down_peak, want)
            if now - self._down_since >= self.policy.downscale_delay:
                self._down_since = None
                return self._down_peak
        else:
            self._up_since = self._down_since = None
        return current


class LoadMeter:
    """The load of a pool over an interval: calls in slots or waiting (integrated over time)
    and the waits for a slot. Told of every change; read once per interval."""

    __slots__ = ("_area", "_level", "_since", "_start", "_waits")

    def __init__(self, now: float) -> None:
        self._level = 0
        self._since = now
        self._start = now
        self._area = 0.0
        self._waits: list[float] = []

    def level(self, now: float, calls: int) -> None:
        """From `now` on, `calls` hold a slot or wait for one."""
        self._area += self._level * (now - self._since)
        self._level, self._since = calls, now

    def waited(self, seconds: float) -> None:
        """A call got its slot after waiting `seconds`."""
        self._waits.append(seconds)

    def take(self, now: float, still_waiting: list[float]) -> tuple[float, float]:
        """(average demand, wait p95) since the last take, which starts a new interval.

        Args:
            still_waiting: how long each call waiting now has waited so far.
        """
        self.level(now, self._level)
        span = now - self._start
        demand = self._area / span if span > 0 else float(self._level)
        waits = sorted(self._waits + still_waiting)
        p95 = waits[min(len(waits) - 1, math.ceil(0.95 * len(waits)) - 1)] if waits else 0.0
        self._area, self._start, self._waits = 0.0, now, []
        return demand, p95
