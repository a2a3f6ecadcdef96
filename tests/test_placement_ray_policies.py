"""The Ray placement's options and decisions, without a cluster: each option is checked when the
placement is made (a ToolDefinitionError naming it), and the autoscaler's decision, the load it
is shown, the hedge delay, the hedge race and the line of calls waiting for a slot are pure
functions of what they see and the time, tested here on exact (virtual) times. tests/test_placement_ray_cluster.py has them on a real Ray cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ray")

import trio

from runtime import ToolDefinitionError, ToolOverloaded, ToolUnavailable, open_runtime, tool
from runtime.placement._autoscale import LoadMeter, Scaler
from runtime.placement._hedge import HedgeCounts, LatencyWindow, race
from runtime.placement._ray_options import local_code
from runtime.placement._slots import Line
from runtime.placement.ray import Autoscaling, Hedge, NodeAffinity, Ray

NODE = "ab" * 28


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"replicas": 0}, "Ray: replicas must be a positive int, not 0"),
        ({"replicas": True}, "Ray: replicas must be a positive int, not True"),
        ({"min_replicas": 2}, "min_replicas= and autoscaling= scale the replicas up to max_replicas="),
        ({"autoscaling": Autoscaling()}, "max_replicas=, which is missing"),
        ({"min_replicas": 3, "max_replicas": 2}, "must lie between min_replicas=3 and max_replicas=2"),
        ({"replicas": 5, "max_replicas": 4}, "replicas=5 (the count it starts with) must lie between"),
        (
            {"max_queued": -1},
            "max_queued must be an int >= 0 (calls that may wait per replica) or None, not -1",
        ),
        (
            {"scheduling": "pack"},
            'scheduling must be "default", "spread" or a NodeAffinity(...), not \'pack\'',
        ),
        ({"resources": {"CPU": 1}}, "resources= names Ray's own CPU: give CPUs and GPUs as num_cpus="),
        ({"resources": {"a100": -1}}, "resources must be a dict of custom resource names to amounts >= 0"),
        ({"num_cpus": -0.5}, "num_cpus must be a number >= 0, not -0.5"),
        ({"hedge": 0.2}, "hedge must be a Hedge(...) or None, not 0.2"),
        ({"autoscaling": 3, "max_replicas": 2}, "autoscaling must be an Autoscaling(...) or None, not 3"),
        ({"cancel_grace": -1}, "cancel_grace must be a number of seconds >= 0, not -1"),
    ],
)
def test_each_option_is_checked_when_the_placement_is_made(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        Ray(**options)
    assert message in str(raised.value)


def test_node_affinity_wants_node_ids() -> None:
    with pytest.raises(ToolDefinitionError, match="give at least one Ray node id"):
        NodeAffinity()
    with pytest.raises(ToolDefinitionError, match="not 'node-1'"):
        NodeAffinity("node-1")
    affinity = NodeAffinity(NODE, soft=True)
    assert affinity == NodeAffinity(NODE, soft=True)
    assert affinity.node_ids == (NODE,)


def test_autoscaling_starts_at_its_floor_and_says_its_bounds() -> None:
    placement = Ray(min_replicas=2, max_replicas=6, max_queued=4, scheduling="spread", num_cpus=0)
    assert placement.options.replicas == 2
    assert repr(placement) == (
        "Ray(replicas=2, num_cpus=0, num_gpus=0, address=None, min_replicas=2, max_replicas=6, "
        "max_queued=4, scheduling='spread')"
    )
    assert Ray(max_replicas=3).options.lowest == 1


def test_capacity_is_the_engines_bound_unless_the_replicas_keep_their_own_line() -> None:
    @tool(max_concurrency=4)
    async def four(x: int) -> int:
        return x

    assert Ray(replicas=2).capacity(four) == 8
    assert Ray(min_replicas=1, max_replicas=3).capacity(four) == 12  # room for the most replicas
    assert Ray(replicas=2, max_queued=10).capacity(four) == float("inf")  # it refuses past its line


def ray_plain(x: int) -> int:
    return x


async def test_hedging_a_tool_that_is_not_idempotent_is_refused_when_the_runtime_opens() -> None:
    plain = tool(ray_plain, placement=Ray(replicas=2, hedge=Hedge(after=0.1)))
    with pytest.raises(ToolDefinitionError, match="only an idempotent tool allows"):
        async with open_runtime([plain]):
            pass


def test_local_code_goes_to_the_job_and_uris_to_the_replicas() -> None:
    import runtime

    env = {"py_modules": [runtime, "./tools", "gcs://pkg.zip"], "working_dir": ".", "pip": ["x"]}
    actor, local = local_code(env)
    assert actor == {"py_modules": ["gcs://pkg.zip"], "pip": ["x"]}
    assert local == ["runtime", "./tools", "."]
    assert local_code({"env_vars": {"A": "1"}}) == ({"env_vars": {"A": "1"}}, [])


# -- the autoscaler's decision, on exact times ----------------------------------------------


def scaler(**policy: float) -> Scaler:
    values = {"interval": 0.5, "upscale_delay": 1.0, "downscale_delay": 4.0, "max_wait": 0.1, **policy}
    return Scaler(Autoscaling(**values), lowest=1, highest=8, slots=2)


def test_load_asks_for_replicas_by_slots_within_the_bounds() -> None:
    s = scaler()
    assert s.wanted(current=1, demand=0.0, wait_p95=0.0) == 1  # never below min_replicas
    assert s.wanted(current=1, demand=4.0, wait_p95=0.0) == 2  # two slots a replica
    assert s.wanted(current=1, demand=4.2, wait_p95=0.0) == 3
    assert s.wanted(current=1, demand=400.0, wait_p95=0.0) == 8  # never above max_replicas
    assert s.wanted(current=2, demand=1.0, wait_p95=0.5) == 3  # long waits: one more, whatever the average
    assert scaler(target=0.5).wanted(current=1, demand=4.0, wait_p95=0.0) == 4  # aim at half-busy slots


def test_a_burst_shorter_than_the_upscale_delay_adds_no_replica() -> None:
    s = scaler()
    assert s.decide(0.5, current=1, demand=10.0, wait_p95=0.0) == 1  # wanted since 0.5
    assert s.decide(1.0, current=1, demand=10.0, wait_p95=0.0) == 1
    assert s.decide(1.5, current=1, demand=1.0, wait_p95=0.0) == 1  # the burst is over: the clock resets
    assert s.decide(2.0, current=1, demand=10.0, wait_p95=0.0) == 1  # wanted again since 2.0
    assert s.decide(2.5, current=1, demand=10.0, wait_p95=0.0) == 1
    assert s.decide(3.0, current=1, demand=10.0, wait_p95=0.0) == 5  # for 1.0 s: as many as it asks


def test_a_lull_shorter_than_the_downscale_delay_removes_none_and_down_goes_to_its_peak() -> None:
    s = scaler()
    assert s.decide(10.0, current=6, demand=2.0, wait_p95=0.0) == 6  # fewer wanted since 10.0
    assert s.decide(12.0, current=6, demand=12.0, wait_p95=0.0) == 6  # the load is back: the clock resets
    assert s.decide(13.0, current=6, demand=0.0, wait_p95=0.0) == 6  # fewer wanted since 13.0
    assert s.decide(15.0, current=6, demand=6.0, wait_p95=0.0) == 6  # 3 wanted: the peak of this lull
    assert s.decide(16.5, current=6, demand=0.0, wait_p95=0.0) == 6
    assert s.decide(17.0, current=6, demand=0.0, wait_p95=0.0) == 3  # 4.0 s of fewer: down to the peak


def test_a_load_at_a_boundary_does_not_flap() -> None:
    s = scaler(upscale_delay=1.0, downscale_delay=4.0)
    current, changes = 2, 0
    for i in range(200):  # the demand crosses 2 replicas' worth (4 calls) every interval
        demand = 4.4 if i % 2 else 3.6
        wanted = s.decide(i * 0.5, current=current, demand=demand, wait_p95=0.0)
        changes += wanted != current
        current = wanted
    assert (current, changes) == (2, 0)


def test_the_load_meter_averages_over_time_and_counts_waits_still_running() -> None:
    meter = LoadMeter(now=0.0)
    meter.level(0.0, 4)  # 4 calls for 1 s
    meter.level(1.0, 0)  # none for 1 s
    meter.waited(0.01)
    meter.waited(0.02)
    demand, p95 = meter.take(2.0, still_waiting=[0.5])
    assert demand == 2.0
    assert p95 == 0.5  # a call still waiting counts with what it has waited so far
    meter.level(2.5, 2)
    assert meter.take(3.0, still_waiting=[]) == (1.0, 0.0)  # a new interval


def test_the_hedge_delay_is_the_observed_quantile_once_enough_calls_were_timed() -> None:
    window = LatencyWindow(Hedge(quantile=0.95, min_samples=20))
    for i in range(19):
        window.add(0.001 * (i + 1))
    assert window.quantile() is None  # too few timed: no hedging yet
    window.add(0.020)
    assert window.quantile() == 0.019  # the 19th of 20, sorted
    for _ in range(200):
        window.add(0.5)
    assert window.quantile() == 0.5


# -- hedging and the line, on trio's virtual clock ------------------------------------------


class Seat:
    def __init__(self, name: str) -> None:
        self.name = name
        self.in_flight = 0
        self.draining = False


def attempts(plan: dict[str, tuple[float, Any]], log: list[str]) -> Any:
    """An attempt on a seat: sleeps its time, then returns its value or raises it."""

    async def attempt(seat: Seat) -> Any:
        log.append(f"{seat.name} starts at {trio.current_time():g}")
        seconds, answer = plan[seat.name]
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            log.append(f"{seat.name} cancelled at {trio.current_time():g}")
            raise
        if isinstance(answer, Exception):
            raise answer
        return answer

    return attempt


async def test_a_call_that_answers_within_the_delay_is_not_hedged(autojump_clock: Any) -> None:
    counts, log = HedgeCounts(), list[str]()
    a, b = Seat("a"), Seat("b")
    value = await race(attempts({"a": (0.1, "A")}, log), a, 0.5, lambda: b, counts)
    assert value == "A"
    assert trio.current_time() == 0.1
    assert (counts.hedged, counts.wins, counts.cancelled) == (0, 0, 0)


async def test_the_hedge_answers_first_and_the_slow_attempt_is_cancelled(autojump_clock: Any) -> None:
    counts, log = HedgeCounts(), list[str]()
    a, b = Seat("a"), Seat("b")
    value = await race(attempts({"a": (60, "A"), "b": (0.1, "B")}, log), a, 0.5, lambda: b, counts)
    assert value == "B"
    assert trio.current_time() == pytest.approx(0.6)
    assert log == ["a starts at 0", "b starts at 0.5", "a cancelled at 0.6"]
    assert (counts.hedged, counts.wins, counts.cancelled) == (1, 1, 1)


async def test_no_free_replica_means_no_hedge(autojump_clock: Any) -> None:
    counts, log = HedgeCounts(), list[str]()
    value = await race(attempts({"a": (3, "A")}, log), Seat("a"), 0.5, lambda: None, counts)
    assert (value, trio.current_time()) == ("A", 3)
    assert counts.hedged == 0


async def test_an_attempt_lost_with_its_replica_waits_for_the_other(autojump_clock: Any) -> None:
    counts, log = HedgeCounts(), list[str]()
    lost = ToolUnavailable("its Ray replica was lost with its node")
    plan = {"a": (1.0, lost), "b": (2.0, "B")}
    assert await race(attempts(plan, log), Seat("a"), 0.5, lambda: Seat("b"), counts) == "B"
    assert trio.current_time() == 2.5
    # ... but the tool's own error is its answer
    plan = {"a": (1.0, ValueError("no")), "b": (2.0, "B")}
    with pytest.raises(ValueError, match="no"):
        await race(attempts(plan, log), Seat("a"), 0.5, lambda: Seat("b"), counts)


async def test_the_line_hands_freed_slots_in_order_and_refuses_past_max_queued(autojump_clock: Any) -> None:
    seat = Seat("a")
    line: Line[Seat] = Line([seat], slots=1, max_queued=2, replicas=lambda: 1)
    order: list[int] = []
    refused: list[str] = []

    async def call(i: int) -> None:
        try:
            got = await line.acquire("replicas")
        except ToolOverloaded as exc:
            refused.append(str(exc))
            return
        order.append(i)
        await trio.sleep(1)
        line.release(got)

    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(call, i)
            await trio.sleep(0.01)  # in this order
    assert order == [0, 1, 2]  # one ran, two waited their turn ...
    assert len(refused) == 2  # ... and two found the line full
    assert refused[0] == "2 calls are waiting for its 1 replicas (max_queued=2 per replica); try again later"
    assert (line.busy, line.waiting, line.overloaded, seat.in_flight) == (0, 0, 2, 0)


async def test_a_call_cancelled_in_line_leaves_it(autojump_clock: Any) -> None:
    seat = Seat("a")
    line: Line[Seat] = Line([seat], slots=1, max_queued=None, replicas=lambda: 1)
    held = await line.acquire("replicas")
    with trio.move_on_after(1):
        await line.acquire("replicas")
    assert line.waiting == 0
    line.release(held)
    assert (line.busy, seat.in_flight) == (0, 0)
