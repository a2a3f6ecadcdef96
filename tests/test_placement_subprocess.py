"""Subprocess placement: tools in worker processes of their own, through the whole runtime.

Real processes, real signals: a segfault in C, os._exit, a tool blocked in time.sleep, a
memory hog under RLIMIT_AS. Wall time is bounded only loosely (a worker starts in about a
tenth of a second); speed is measured in benchmarks/bench_placement.py.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import placement_tools as pt
import pytest
import trio
import trio.lowlevel
import trio.testing
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import (
    CallContext,
    FailureKind,
    RestartPolicy,
    ToolCall,
    ToolDefinitionError,
    ToolFailure,
    ToolSet,
    ToolSuccess,
    open_runtime,
    reporting,
    tool,
)
from runtime.embed import RuntimeThread
from runtime.exceptions import CallStopped
from runtime.placement import InProcess, Placement, Subprocess
from runtime.placement._worker import Spin
from runtime.tools import PlacementStatistics, Tool
from runtime.tracing import Tracing

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and /proc: Linux")


def call(name: str, arguments: str = "{}", id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments)


async def wait_for_file(path: Path) -> int:
    """The pid a tool wrote to `path` (from another process: there is no event to wait on)."""
    file = trio.Path(path)
    with trio.fail_after(30):
        while True:
            if await file.exists() and (text := await file.read_text()):
                return int(text)
            await trio.sleep(0.005)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_segfault_fails_only_its_call_naming_the_signal_and_the_worker_is_replaced() -> None:
    async with open_runtime([pt.crashy], tracing=False) as rt:
        first = await rt.call(call("crashy"))
        assert first.ok
        crashed = await rt.call(call("crashy", '{"how": "segfault"}'))
        assert not crashed.ok
        assert crashed.kind is FailureKind.ERROR
        assert "killed by SIGSEGV" in crashed.message
        assert f"pid {first.value}" in crashed.message
        after = await rt.call(call("crashy"))
        assert after.ok
        assert after.value != first.value  # a new worker
        assert not alive(first.value)
        stats = rt.statistics().tools["crashy"]
        assert stats.restarts == 1
        assert stats.state == "up"
        assert stats.failures == {"error": 1}


async def test_os_exit_fails_its_call_naming_the_exit_code_and_is_never_retried() -> None:
    async with open_runtime([pt.crashy], tracing=False) as rt:
        before = await rt.call(call("crashy"))
        result = await rt.call(call("crashy", '{"how": "exit"}'))
        assert result.kind is FailureKind.ERROR
        assert "exited with code 3" in result.message
        after = await rt.call(call("crashy"))
        assert after.ok
        assert after.value != before.value
        assert rt.statistics().tools["crashy"].calls == 3  # the crashed call ran once, not again


async def test_workers_that_keep_dying_mark_the_tool_down_and_others_keep_serving() -> None:
    async with open_runtime(
        [pt.crashy, pt.add], tracing=False, restart=RestartPolicy(max_restarts=1, within=60, backoff=0.01)
    ) as rt:
        for _ in range(2):
            assert (await rt.call(call("crashy", '{"how": "exit"}'))).kind is FailureKind.ERROR
        down = await rt.call(call("crashy"))
        assert down.kind is FailureKind.UNAVAILABLE
        assert "died 2 times" in down.message
        assert rt.statistics().tools["crashy"].state == "down"
        assert (await rt.call(call("add", '{"a": 2, "b": 3}'))).value == 5


async def test_a_timeout_kills_the_stuck_worker_and_answers_at_the_deadline(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    arguments = f'{{"pid_file": "{pid_file}"}}'
    async with open_runtime([pt.stuck], tracing=False) as rt:
        started = trio.current_time()
        result = await rt.call(call("stuck", arguments))
        elapsed = trio.current_time() - started
        assert result.kind is FailureKind.TIMEOUT
        assert "within 1s" in result.message
        assert elapsed < 10  # about a second; far from the 60 s the tool sleeps
        pid = int(pid_file.read_text())
        assert not alive(pid)  # killed and reaped before the answer: nothing runs on
        stats = rt.statistics().tools["stuck"]
        assert stats.abandoned == 0
        assert stats.abandoned_running == 0
        assert stats.restarts == 0  # a timeout is not a crash
        pid_file.unlink()
        # A new worker serves (on a loaded machine its start may outlast the 1 s timeout).
        with trio.fail_after(30):
            while not (
                again := await rt.call(call("stuck", f'{{"pid_file": "{pid_file}", "seconds": 0}}'))
            ).ok:
                assert again.kind is FailureKind.TIMEOUT
        assert int(pid_file.read_text()) != pid


async def test_caller_cancellation_kills_the_worker_too(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    async with open_runtime([pt.sleeper], tracing=False) as rt:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rt.call, call("sleeper", f'{{"pid_file": "{pid_file}"}}'))
            pid = await wait_for_file(pid_file)
            nursery.cancel_scope.cancel()  # the caller gives up while the tool blocks in C
        # The caller is answered at once; the actor kills the worker as the cancellation reaches it.
        with trio.fail_after(5):
            while alive(pid):  # noqa: ASYNC110 - another process, no event to wait on
                await trio.sleep(0.005)
        assert rt.statistics().tools["sleeper"].failures == {"cancelled": 1}
        assert rt.statistics().tools["sleeper"].abandoned == 0


async def test_parallel_calls_spread_over_the_workers_and_come_back_in_order() -> None:
    calls = [call("whoami", f'{{"i": {i}}}', id=f"c{i}") for i in range(40)]
    async with open_runtime([pt.whoami], tracing=False) as rt:
        results = await rt.call_many(calls)
        assert [r.value["i"] for r in results] == list(range(40))
        assert [r.call_id for r in results] == [c.id for c in calls]
        pids = {r.value["pid"] for r in results}
        assert len(pids) == 4
        assert os.getpid() not in pids
        assert rt.statistics().tools["whoami"].succeeded == 40


async def test_calls_one_at_a_time_go_to_the_worker_that_served_last() -> None:
    """The idle workers are a stack: a call takes the one that answered last (its caches and
    its core are still warm; handing calls round the pool cost a third of a warm call)."""
    async with open_runtime([pt.whoami], tracing=False) as rt:
        assert rt.statistics().tools["whoami"].placement.workers == 4  # type: ignore[union-attr]
        pids = [(await rt.call(call("whoami", '{"i": 0, "pause": 0}'))).value["pid"] for _ in range(6)]  # type: ignore[union-attr]
        assert len(set(pids)) == 1, pids


async def test_print_goes_to_the_log_tagged_with_tool_and_pid_and_the_result_still_arrives(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="runtime.placement")
    async with open_runtime([pt.chatty], tracing=False) as rt:
        result = await rt.call(call("chatty", '{"text": "hello"}'))
        assert result.ok
        assert result.content == "HELLO"
    printed = [r for r in caplog.records if "chatty says hello" in r.getMessage()]
    assert len(printed) == 1
    assert printed[0].tool == "chatty"  # type: ignore[attr-defined]
    assert printed[0].worker_pid != os.getpid()  # type: ignore[attr-defined]


async def test_a_memory_hog_over_the_hard_cap_gets_error_and_its_worker_is_replaced() -> None:
    async with open_runtime([pt.hog], tracing=False) as rt:
        before = await rt.call(call("hog", '{"megabytes": 1}'))
        assert before.ok
        result = await rt.call(call("hog", '{"megabytes": 4096}'))
        assert result.kind is FailureKind.ERROR
        assert "MemoryError" in result.message
        after = await rt.call(call("hog", '{"megabytes": 1}'))
        assert after.ok
        assert after.value != before.value
        assert rt.statistics().tools["hog"].restarts == 0  # retired, not crashed


async def test_a_worker_left_above_max_rss_is_retired_after_its_call() -> None:
    async with open_runtime([pt.leak], tracing=False) as rt:
        first = await rt.call(call("leak", '{"megabytes": 0}'))
        leaked = await rt.call(call("leak", '{"megabytes": 200}'))
        assert leaked.ok
        assert leaked.value == first.value
        after = await rt.call(call("leak", '{"megabytes": 0}'))
        assert after.ok
        assert after.value != first.value
        assert not alive(first.value)


def make_closure_tool():  # type: ignore[no-untyped-def]
    @tool(placement=Subprocess())
    def local_add(a: int, b: int) -> int:
        return a + b

    return local_add


class Methods(ToolSet):
    @tool(placement=Subprocess())
    def greet(self, name: str) -> str:
        return f"hi {name}"


async def test_a_tool_that_cannot_be_imported_by_reference_is_refused_at_open() -> None:
    with pytest.raises(
        ToolDefinitionError, match=r"tool 'local_add' cannot run in a worker process.*inside a function"
    ):
        async with open_runtime([make_closure_tool()], tracing=False):
            pass
    with pytest.raises(ToolDefinitionError, match=r"tool 'greet' .*bound to one instance"):
        async with open_runtime(Methods().tools(), tracing=False):
            pass


async def test_no_worker_is_left_after_the_runtime_closes() -> None:
    async with open_runtime([pt.whoami, pt.Counter()], tracing=False) as rt:
        results = await rt.call_many([call("whoami", f'{{"i": {i}, "pause": 0.1}}') for i in range(8)])
        counted = await rt.call_many([call("counter", '{"text": "x"}') for _ in range(6)])
        pids = {r.value["pid"] for r in results} | {r.value["pid"] for r in counted}
        assert len(pids) == 6
        assert all(alive(p) for p in pids)
    assert not any(alive(p) for p in pids)


async def test_class_tools_set_up_in_each_worker() -> None:
    async with open_runtime([pt.Counter()], tracing=False) as rt:
        results = await rt.call_many([call("counter", '{"text": "x"}') for _ in range(10)])
    by_pid: dict[int, list[int]] = {}
    for r in results:
        by_pid.setdefault(r.value["pid"], []).append(r.value["count"])
    assert len(by_pid) == 2
    assert sorted(c for counts in by_pid.values() for c in counts) == sorted(
        c for counts in by_pid.values() for c in range(1, len(counts) + 1)
    )


async def test_a_setup_that_fails_in_the_worker_marks_the_tool_down_with_the_reason() -> None:
    async with open_runtime([pt.BrokenSetup()], tracing=False, restart=RestartPolicy(max_restarts=0)) as rt:
        result = await rt.call(call("broken_setup", '{"text": "x"}'))
        assert result.kind is FailureKind.UNAVAILABLE
        assert "no database" in result.message


async def test_failure_kinds_are_the_same_as_in_process() -> None:
    async with open_runtime([pt.judge], tracing=False) as rt:
        results = await rt.call_many(
            [
                call("judge", '{"n": 2}'),
                call("judge", '{"n": 3}'),
                call("judge", '{"n": 0}'),
                call("judge", '{"n": "two"}'),
                call("judge", "{not json"),
            ]
        )
    assert results[0].ok
    assert results[0].value == 2
    assert results[1].kind is FailureKind.REJECTED
    assert results[1].message == "3 is odd"
    assert results[2].kind is FailureKind.ERROR
    assert results[2].message == "tool 'judge' raised ZeroDivisionError: n must not be zero"
    assert results[2].error_type == "ZeroDivisionError"
    assert results[3].kind is FailureKind.INVALID_ARGUMENTS
    assert "$.n" in results[3].message
    assert results[4].kind is FailureKind.INVALID_ARGUMENTS


async def test_a_restart_on_exception_in_a_worker_restarts_the_actor() -> None:
    async with open_runtime([pt.flaky], tracing=False, restart=RestartPolicy(backoff=0.01)) as rt:
        before = await rt.call(call("flaky", '{"fail_now": false}'))
        failed = await rt.call(call("flaky", '{"fail_now": true}'))
        assert failed.kind is FailureKind.ERROR
        assert "connection poisoned" in failed.message
        after = await rt.call(call("flaky", '{"fail_now": false}'))
        assert after.ok
        assert after.value != before.value
        assert rt.statistics().tools["flaky"].restarts == 1


async def test_the_tool_sees_a_plain_copy_of_its_context() -> None:
    async with open_runtime([pt.context_echo], tracing=False) as rt:
        result = await rt.call(call("context_echo", '{"text": "hi"}', id="call-7"), metadata={"user": "ada"})
    assert result.value == {
        "text": "hi",
        "call_id": "call-7",
        "tool": "context_echo",
        "user": "ada",
        "has_deadline": True,
    }


async def test_the_calls_span_is_the_parent_of_the_work_in_the_worker() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    async with open_runtime([pt.span_parent], tracing=Tracing(tracer_provider=provider)) as rt:
        result = await rt.call(call("span_parent"))
    (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool span_parent"]
    assert result.value == f"{span.context.trace_id:032x}-{span.context.span_id:016x}"


async def test_an_idle_worker_killed_from_outside_is_replaced() -> None:
    async with open_runtime([pt.crashy], tracing=False, restart=RestartPolicy(backoff=0.01)) as rt:
        first = await rt.call(call("crashy"))
        os.kill(first.value, 9)
        with trio.fail_after(10):
            while rt.statistics().tools["crashy"].restarts == 0:  # noqa: ASYNC110 - another process dies
                await trio.sleep(0.01)
        after = await rt.call(call("crashy"))
        assert after.ok
        assert after.value != first.value


async def test_a_replacement_waiting_for_its_backoff_is_counted_as_starting_not_serving() -> None:
    async with open_runtime([pt.crashy], tracing=False, restart=RestartPolicy(backoff=1.0)) as rt:

        def counts() -> tuple[int, int, int]:
            placed = rt.statistics().tools["crashy"].placement
            assert placed is not None
            return placed.workers, placed.starting, placed.lost

        assert counts() == (1, 0, 0)
        assert (await rt.call(call("crashy", '{"how": "exit"}'))).kind is FailureKind.ERROR
        assert counts() == (0, 1, 1)  # its replacement waits 1 s before it starts
        assert (await rt.call(call("crashy"))).ok
        assert counts() == (1, 0, 1)


def test_placement_options_are_checked_at_definition() -> None:
    with pytest.raises(ToolDefinitionError, match="workers must be a positive int"):
        Subprocess(workers=0)
    for spin in (-1, 10_001, 1.5, True, None):
        with pytest.raises(ToolDefinitionError, match=r"spin_us must be an int from 0 to 10,000"):
            Subprocess(spin_us=spin)  # type: ignore[arg-type]
    assert Subprocess(spin_us=0).spin_us == 0
    assert Subprocess().spin_us == 50
    with pytest.raises(ToolDefinitionError, match="placement must be"):

        @tool(placement="subprocess")  # type: ignore[arg-type]
        def f(x: int) -> int:
            return x

    assert InProcess() == InProcess()


ORPHAN_SCRIPT = """
import sys, trio
sys.path.insert(0, {tests!r})
import placement_tools as pt
from runtime import ToolCall, open_runtime

async def main():
    async with open_runtime([pt.crashy], tracing=False) as rt:
        result = await rt.call(ToolCall(id="p", name="crashy"))
        print(result.value, flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


async def test_workers_exit_when_the_runtimes_process_is_killed() -> None:
    script = ORPHAN_SCRIPT.format(tests=str(Path(__file__).parent))
    proc = await trio.lowlevel.open_process([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        with trio.fail_after(30):
            line = b""
            while not line.endswith(b"\n"):
                line += await proc.stdout.receive_some(100)
        worker = int(line)
        assert alive(worker)
        proc.kill()
        await proc.wait()
        with trio.fail_after(10):  # the worker notices its parent is gone within a second
            while alive(worker):  # noqa: ASYNC110 - another process, no event to wait on
                await trio.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        assert proc.stdout is not None
        await proc.stdout.aclose()


def test_subprocess_tools_work_from_a_runtime_thread() -> None:
    with RuntimeThread([pt.crashy], tracing=False) as rt:
        crashed = rt.call(call("crashy", '{"how": "segfault"}'))
        assert crashed.kind is FailureKind.ERROR  # type: ignore[union-attr]
        assert "SIGSEGV" in crashed.message  # type: ignore[union-attr]
        assert rt.call(call("crashy")).ok


SCRIPT_WITH_TOOL = """
import os, trio
from runtime import ToolCall, open_runtime, tool
from runtime.placement import Subprocess

@tool(placement=Subprocess())
def where(n: int) -> list[int]:
    return [n, os.getpid()]

async def main():
    async with open_runtime([where], tracing=False) as rt:
        result = await rt.call(ToolCall(id="1", name="where", arguments='{"n": 7}'))
        print(result.content, os.getpid(), flush=True)

if __name__ == "__main__":
    print("main block ran", flush=True)
    trio.run(main)
"""


async def test_a_tool_defined_in_a_scripts_main_runs_in_a_worker_without_rerunning_the_main_block(
    tmp_path: Path,
) -> None:
    script = tmp_path / "agent.py"
    await trio.Path(script).write_text(SCRIPT_WITH_TOOL)
    done = await trio.run_process([sys.executable, str(script)], capture_stdout=True, capture_stderr=True)
    lines = done.stdout.decode().splitlines()
    assert lines[0] == "main block ran"  # once: the worker imports the script as __mp_main__
    assert len(lines) == 2
    content, parent = lines[1].split()
    n, worker = json.loads(content)
    assert n == 7
    assert worker != int(parent)


async def test_progress_and_logs_travel_back_to_the_callers_handlers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="runtime.tools")
    heard: list[tuple[str, float, float | None, str | None]] = []
    logged: list[tuple[str, str, str, dict[str, object]]] = []

    async def on_progress(
        ctx: CallContext, progress: float, total: float | None, message: str | None
    ) -> None:
        heard.append((ctx.call_id, progress, total, message))

    async def on_log(ctx: CallContext, level: str, message: str, data: dict[str, object]) -> None:
        logged.append((ctx.call_id, level, message, data))

    async with open_runtime([pt.reporter], tracing=False) as rt:
        with reporting(on_progress=on_progress, on_log=on_log):
            result = await rt.call(call("reporter", '{"steps": 3}', id="r1"))
    assert result.ok
    assert result.value["heard"] is True  # the worker knows a handler listens
    assert heard == [("r1", 1.0, 3.0, "step 1"), ("r1", 2.0, 3.0, "step 2"), ("r1", 3.0, 3.0, "step 3")]
    assert logged == [("r1", "warning", "almost done", {"pid": result.value["pid"]})]
    assert any(r.name == "runtime.tools.reporter" and "almost done" in r.getMessage() for r in caplog.records)


async def wait_until_it_serves(rt: Any, name: str, arguments: str = "{}") -> float:
    """Seconds until a call of `name` succeeds again (each try is one call: it is down until then)."""
    start = trio.current_time()
    with trio.fail_after(60):
        while True:
            if (await rt.call(call(name, arguments, id="probe"))).ok:
                return trio.current_time() - start
            await trio.sleep(0.05)


async def wait_for_state(rt: Any, name: str, state: str) -> None:
    """Until the tool is in `state` (its workers are other processes: no event to wait on)."""
    with trio.fail_after(30):
        while True:
            if rt.statistics().tools[name].state == state:
                return
            await trio.sleep(0.05)


async def test_a_tool_taken_down_by_a_turn_of_segfaults_serves_again_after_its_cool_down() -> None:
    # One model turn of four parallel calls on an input that segfaults: four deaths within 5 s
    # (the default policy) take the tool down. Before, it stayed down until the process restarted.
    async with open_runtime([pt.crashy], tracing=False, restart=RestartPolicy(cool_down=1.0)) as rt:
        turn = await rt.call_many([call("crashy", '{"how": "segfault"}', id=f"s{i}") for i in range(4)])
        assert all(not r.ok for r in turn)
        await wait_for_state(rt, "crashy", "down")
        down = await rt.call(call("crashy"))
        back_in = await wait_until_it_serves(rt, "crashy")
        stats = rt.statistics().tools["crashy"]
    assert down.kind is FailureKind.UNAVAILABLE
    assert "it is tried again in 1s" in down.message
    assert back_in < 30
    assert (stats.state, stats.down_reason) == ("up", None)
    print(f"down -> serving again in {back_in:.2f} s (cool-down 1 s)")


async def test_a_worker_that_cannot_start_for_want_of_file_descriptors_is_not_a_crash() -> None:
    # A moment without file descriptors in this process (another tool leaking them) used to take a
    # healthy tool down for good: each failed start of the replacement counted as a death.
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    policy = RestartPolicy(max_restarts=1, backoff=0.05, max_backoff=0.2)
    async with open_runtime([pt.crashy], tracing=False, restart=policy) as rt:
        assert (await rt.call(call("crashy"))).ok
        open_now = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 1, hard))  # no room for a worker's pipes
        try:
            lost = await rt.call(call("crashy", '{"how": "exit"}'))  # one death: its replacement cannot start
            await trio.sleep(1.0)  # several starts fail meanwhile (0.05, 0.1, 0.2, 0.2 s apart)
            during = rt.statistics().tools["crashy"]
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        back_in = await wait_until_it_serves(rt, "crashy")
        stats = rt.statistics().tools["crashy"]
    assert lost.kind is FailureKind.ERROR
    assert during.state == "up"  # restarting its worker, never down: one death counted (max 1)
    assert during.restarts == 1
    assert (stats.state, stats.restarts) == ("up", 1)
    assert back_in < 10


# -- no hop: a trio caller's call runs in the caller's task ------------------------------------


def _task_names() -> set[str]:
    names: set[str] = set()
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        names.add(task.name)
        todo.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return names


async def test_rt_call_runs_a_placed_call_in_the_callers_task_and_a_busy_tool_queues_on_workers(
    tmp_path: Path,
) -> None:
    """`rt.call` of a Subprocess tool with a free worker waits on the pipe in its own task: no
    worker task exists while it runs. A second call while the one worker is busy waits in the
    mailbox and is served by a worker task, as before; both answer."""
    pid_file = tmp_path / "pid"
    async with open_runtime([pt.sleeper], tracing=False) as rt, trio.open_nursery() as nursery:
        first: list[Any] = []
        answered = trio.Event()

        async def caller() -> None:
            first.append(
                await rt.call(call("sleeper", json.dumps({"pid_file": str(pid_file), "seconds": 1})))
            )
            answered.set()

        nursery.start_soon(caller, name="the caller")
        await wait_for_file(pid_file)
        names = _task_names()
        assert "the caller" in names
        assert not any(name.startswith("tool sleeper worker") for name in names), names
        second = await rt.call(
            call("sleeper", json.dumps({"pid_file": str(pid_file), "seconds": 0}), id="c2")
        )
        assert second.ok, second
        with trio.fail_after(30):
            await answered.wait()
        assert first[0].ok, first[0]


async def test_closing_the_runtime_under_a_call_run_in_its_callers_task_answers_it_and_kills_the_worker(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pid"
    results: list[Any] = []
    async with (
        trio.open_nursery() as nursery,
        open_runtime([pt.sleeper], tracing=False, shutdown_timeout=0.2) as rt,
    ):

        async def caller() -> None:
            results.append(await rt.call(call("sleeper", json.dumps({"pid_file": str(pid_file)}))))

        nursery.start_soon(caller)
        await wait_for_file(pid_file)
    assert len(results) == 1
    assert results[0].kind is FailureKind.UNAVAILABLE, results[0]
    assert not alive(int(pid_file.read_text()))


class _InCallerPlacement(Placement):
    """A placement whose calls wait in their caller's task (`in_caller`), served by `pool`."""

    in_caller = True

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def capacity(self, tool: Any) -> int:
        return 1

    def open(self, tool: Any, host: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._open()

    @contextlib.asynccontextmanager
    async def _open(self) -> Any:
        yield self.pool


class _InterruptedPool:
    """Calls interrupted in their caller's task by Ctrl-C: what a KeyboardInterrupt delivered to
    the main task looks like."""

    async def start(self) -> None:
        pass

    def statistics(self) -> PlacementStatistics:
        return PlacementStatistics(workers=1, target=1)

    async def call(self, call: ToolCall, arguments: bytes, ctx: Any, timeout: float | None) -> Any:
        await trio.lowlevel.checkpoint()
        raise KeyboardInterrupt


@tool(placement=_InCallerPlacement(_InterruptedPool()))
def interrupted() -> int:
    """Never runs: its placement is interrupted first."""
    return 1


class _NoArgs(msgspec.Struct):
    pass


class _AnsweringPool(_InterruptedPool):
    """Answers in its caller's task, waiting (`waits`) for the other process or not (a reply
    already there)."""

    def __init__(self, waits: bool) -> None:
        self.waits = waits

    async def call(self, call: ToolCall, arguments: bytes, ctx: Any, timeout: float | None) -> Any:
        if self.waits:
            await trio.lowlevel.checkpoint()
        return ToolSuccess(call_id=call.id, tool=call.name, content="1", value=1)


@tool(placement=_InCallerPlacement(_AnsweringPool(waits=False)))
def answers_at_once() -> int:
    """Never runs here: its placement answers."""
    return 1


@tool(placement=_InCallerPlacement(_AnsweringPool(waits=True)))
def answers_after_waiting() -> int:
    """Never runs here: its placement answers."""
    return 1


@pytest.mark.parametrize("name", ["answers_at_once", "answers_after_waiting"])
async def test_a_call_run_in_its_callers_task_is_a_checkpoint_whether_or_not_it_waited(name: str) -> None:
    """trio's rule for `rt.call` holds on the in-caller path: a cancel point and a schedule point,
    the extra one kept only when the call's own code did not yield (other tasks run either way)."""
    async with open_runtime([answers_at_once, answers_after_waiting], tracing=False) as rt:
        for _ in range(3):
            with trio.testing.assert_checkpoints():
                result = await rt.call(call(name))
            assert isinstance(result, ToolSuccess)
            assert result.value == 1
        ran_meanwhile = []

        async def other() -> None:
            ran_meanwhile.append(1)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            for _ in range(10):  # a loop of calls never starves another task
                await rt.call(call(name))
            assert ran_meanwhile == [1]


class _RaisesAtOnce(Tool[_NoArgs, int]):
    """An in-caller tool whose code fails before its coroutine exists (`dispatch` raises)."""

    name = "raises_at_once"
    description = "Raises before its coroutine exists."
    in_caller = True

    async def execute(self, args: _NoArgs) -> int:  # pragma: no cover - dispatch raises first
        return 1

    def dispatch(self, args: Any, ctx: Any) -> Any:
        raise ValueError("failed before it began")


async def test_a_call_in_its_callers_task_that_fails_before_it_begins_is_an_error_and_frees_its_slot() -> (
    None
):
    """The tool's own failure, however early, is its ERROR result: it never escapes `rt.call`,
    and the call's slot and count are given back (a review found it escaping, the slot held)."""
    async with open_runtime([_RaisesAtOnce()], tracing=False) as rt:
        for i in range(3):
            result = await rt.call(ToolCall(id=str(i), name="raises_at_once", arguments="{}"))
            assert isinstance(result, ToolFailure)
            assert result.kind is FailureKind.ERROR
            assert "failed before it began" in result.message
        stats = rt.statistics().tools["raises_at_once"]
        assert stats.in_flight == 0
        assert stats.failures == {"error": 3}


async def test_a_keyboard_interrupt_in_the_callers_task_is_the_callers_not_the_tools() -> None:
    """Ctrl-C reaching a call that runs in its caller's task goes on to the caller (it is not
    made the tool's ERROR), the call is answered CANCELLED and its slot given back."""
    async with open_runtime([interrupted], tracing=False) as rt:
        for _ in range(2):  # the slot came back: the second call runs too
            with pytest.raises(KeyboardInterrupt):
                await rt.call(call("interrupted"))
        stats = rt.statistics().tools["interrupted"]
        assert stats.in_flight == 0
        assert stats.failures == {"cancelled": 2}


class _CleaningPool(_InterruptedPool):
    """Calls that, cancelled, clean up under a shield (as Subprocess kills and reaps its worker)."""

    async def call(self, call: ToolCall, arguments: bytes, ctx: Any, timeout: float | None) -> Any:
        try:
            await trio.sleep(10)
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.01)  # the worker killed and reaped
            raise
        return None


@tool(placement=_InCallerPlacement(_CleaningPool()))
def cleans_up() -> int:
    """Never answers: its placement waits."""
    return 1


async def test_the_callers_cancellation_meeting_the_calls_deadline_in_its_cleanup_is_the_callers(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The caller gives up at 1 s, the call's deadline is 1.005 s, and the placement's cleanup
    (shielded, 10 ms) spans both: the caller's cancellation wins (it goes on to the caller, the
    call is CANCELLED), not the deadline (a TIMEOUT returned inside a cancelled scope)."""
    async with open_runtime([cleans_up], tracing=False) as rt:
        with trio.move_on_after(1) as outer:
            await rt.call(call("cleans_up"), timeout=1.005)
        assert outer.cancelled_caught
        assert rt.statistics().tools["cleans_up"].failures == {"cancelled": 1}


async def test_a_call_run_in_its_callers_task_with_no_deadline_ends_with_its_incarnation(
    tmp_path: Path,
) -> None:
    """A call with no timeout runs in its caller's task without a cancel scope of its own; when
    another call's restart_on exception ends the incarnation under it, the pool stops it (its
    worker killed): UNAVAILABLE at once, not after the minute its tool sleeps."""
    pid_file = tmp_path / "pid"
    async with open_runtime([pt.restless], tracing=False) as rt, trio.open_nursery() as nursery:
        results: list[Any] = []

        async def caller() -> None:
            results.append(await rt.call(call("restless", json.dumps({"pid_file": str(pid_file)}))))

        nursery.start_soon(caller)
        pid = await wait_for_file(pid_file)
        with trio.fail_after(10):
            crashed = await rt.call(call("restless", '{"fail_now": true}', id="c2"))
            assert crashed.kind is FailureKind.ERROR, crashed
            while not results:  # noqa: ASYNC110 - the first call's caller is woken by another process
                await trio.sleep(0.01)
        assert results[0].kind is FailureKind.UNAVAILABLE, results[0]
        assert not alive(pid)
        stats = rt.statistics().tools["restless"]
        assert stats.in_flight == 0
        assert stats.failures == {"error": 1, "unavailable": 1}


async def test_closing_the_runtime_under_a_call_waiting_for_a_replacement_worker_answers_it_at_once() -> None:
    """The one worker died and its replacement waits out a long backoff: a call with no deadline
    waits for a worker in its caller's task; closing the runtime stops that wait (UNAVAILABLE),
    it does not last the backoff."""
    results: list[Any] = []
    with trio.fail_after(20):
        async with (
            trio.open_nursery() as nursery,
            open_runtime(
                [pt.crashy], tracing=False, restart=RestartPolicy(backoff=30.0), shutdown_timeout=0.2
            ) as rt,
        ):
            assert (await rt.call(call("crashy", '{"how": "exit"}'))).kind is FailureKind.ERROR

            async def caller() -> None:
                results.append(await rt.call(call("crashy", id="c2")))

            nursery.start_soon(caller)
            await trio.testing.wait_all_tasks_blocked()
            assert not results
    assert len(results) == 1
    assert results[0].kind is FailureKind.UNAVAILABLE, results[0]


class _StoppablePool(_InterruptedPool):
    """Calls that wait until they are stopped, by `stop(task)` or by their cancel scope."""

    def __init__(self) -> None:
        self.stopped: list[trio.lowlevel.Task] = []
        self._waiting: dict[trio.lowlevel.Task, trio.Event] = {}

    async def call(self, call: ToolCall, arguments: bytes, ctx: Any, timeout: float | None) -> Any:
        task = trio.lowlevel.current_task()
        event = self._waiting[task] = trio.Event()
        try:
            await event.wait()
        finally:
            del self._waiting[task]
        raise CallStopped("stopped")

    def stop(self, task: trio.lowlevel.Task) -> None:
        self.stopped.append(task)
        event = self._waiting.get(task)
        if event is not None:  # nothing if the task runs no call here (any more)
            event.set()


class _StoppingPlacement(_InCallerPlacement):
    stops_calls = True


_stoppable_pool = _StoppablePool()


@tool(placement=_StoppingPlacement(_stoppable_pool))
def stoppable() -> int:
    """Never answers: its placement waits until stopped."""
    return 1


async def test_a_call_with_no_deadline_is_stopped_by_its_placement_and_one_with_a_deadline_by_its_scope(
    autojump_clock: trio.abc.Clock,
) -> None:
    """In its caller's task a call with a deadline has a cancel scope of its own, which its
    deadline cancels (TIMEOUT, the placement's `stop` unused); one with none has no scope, and
    the runtime's close ends it through the placement's `stop`, given the caller's own task."""
    _stoppable_pool.stopped.clear()
    results: list[Any] = []
    callers: list[trio.lowlevel.Task] = []
    async with (
        trio.open_nursery() as nursery,
        open_runtime([stoppable], tracing=False, shutdown_timeout=0.5) as rt,
    ):
        timed = await rt.call(call("stoppable"), timeout=1)
        assert timed.kind is FailureKind.TIMEOUT, timed
        assert _stoppable_pool.stopped == []

        async def caller() -> None:
            callers.append(trio.lowlevel.current_task())
            results.append(await rt.call(call("stoppable", id="c2")))

        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
    assert _stoppable_pool.stopped == callers
    assert len(results) == 1
    assert results[0].kind is FailureKind.UNAVAILABLE, results[0]


async def test_a_number_messagepack_cannot_carry_travels_as_its_text() -> None:
    """A result of 2 ** 70 comes back with its text whole and no value (MessagePack's integers
    end at 64 bits), not as an error; 2 ** 60 comes back as both."""
    async with open_runtime([pt.huge], tracing=False) as rt:
        small = await rt.call(call("huge", '{"bits": 60}'))
        assert isinstance(small, ToolSuccess), small
        assert (small.content, small.value) == (str(1 << 60), 1 << 60)
        big = await rt.call(call("huge", '{"bits": 70}'))
        assert isinstance(big, ToolSuccess), big
        assert (big.content, big.value) == (str(1 << 70), None)


async def test_arguments_and_results_larger_than_a_pipe_travel_whole_both_ways() -> None:
    """A 300 KB argument (more than a pipe holds: the request is written in parts, read in
    several) and its 300 KB answer come through whole, and the next small call still works."""
    text = "".join(chr(ord("a") + i % 26) for i in range(300_000))
    async with open_runtime([pt.chatty], tracing=False) as rt:
        result = await rt.call(call("chatty", json.dumps({"text": text})))
        assert isinstance(result, ToolSuccess), result
        assert result.value == text.upper()
        small = await rt.call(call("chatty", '{"text": "ok"}', id="c2"))
        assert isinstance(small, ToolSuccess)
        assert small.value == "OK"


class SteppedClock:
    """A clock that moves `step` seconds each time it is read (the spin's own clock, counted)."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now


def test_a_worker_polls_for_the_next_request_until_its_window_passes_and_no_longer() -> None:
    read, write = os.pipe()
    try:
        idle = SteppedClock(10e-6)
        Spin(read, 50, idle).wait()  # nothing comes: it gives up once 50 us have passed
        assert 6 <= idle.reads <= 7
        os.write(write, b"\0\0\0\0")
        ready = SteppedClock(10e-6)
        Spin(read, 10_000, ready).wait()  # a request is there: the first poll sees it
        assert ready.reads == 1
        os.read(read, 4)
        os.close(write)
        write = -1
        ended = SteppedClock(10e-6)
        Spin(read, 10_000, ended).wait()  # the runtime is gone (the pipe's end): no polling on
        assert ended.reads == 1
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)


def test_a_worker_polls_only_while_its_requests_come_within_the_window() -> None:
    read, write = os.pipe()
    try:
        clock = SteppedClock(10e-6)
        spin = Spin(read, 50, clock)
        spin.wait()  # the first wait polls its window out
        assert 6 <= clock.reads <= 7
        clock.now += 1.0  # the request comes a second later: calls are sparse
        spin.came()
        clock.reads = 0
        spin.wait()  # so it does not poll after this reply: a look at the clock and no more
        assert clock.reads == 1
        spin.came()  # this one came 10 us after the reply
        clock.reads = 0
        spin.wait()  # so it polls again
        assert 6 <= clock.reads <= 7
        os.write(write, b"\0")
        spin.wait()  # a request is there at once
        spin.came()
        os.read(read, 1)
        clock.now += 1.0
        spin.came()  # a request that was in the reader's buffer, read with no wait: no say
        clock.reads = 0
        spin.wait()  # so it still polls
        assert 6 <= clock.reads <= 7
    finally:
        os.close(read)
        os.close(write)


async def test_an_async_workers_poll_lets_its_own_tasks_run() -> None:
    read, write = os.pipe()
    ran = 0

    async def background() -> None:
        nonlocal ran
        while True:
            ran += 1
            await trio.lowlevel.checkpoint()

    try:
        clock = SteppedClock(10e-6)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(background)
            await Spin(read, 100, clock).wait_async()
            nursery.cancel_scope.cancel()
        assert 11 <= clock.reads <= 12
        assert ran >= 5  # its loop ran between the polls (about once for each)
    finally:
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("name", ["eager", "eager_async"])
async def test_a_worker_polls_after_a_burst_of_calls_and_not_once_they_are_sparse(name: str) -> None:
    """The worker across 0.2 s between calls. One that polls 10 ms stays runnable that long
    after a burst of calls back to back (on a core, or yielding it to whoever else wants it: on
    a busy machine it spends little CPU time, by design); after a call that came late (calls
    are sparse) it sleeps at once and spends no CPU time; one with spin_us=0 spends none at all.
    A poll that did not end would spend the whole 0.2 s.

    A burst's calls come "back to back" only if the caller sent each within 10 ms of the last
    reply: a caller kept off its core longer (a loaded machine) sends them later, and then the
    worker rightly does not poll. So rounds go on (up to 10) until one has polled."""

    def polled(spent: tuple[float, float]) -> bool:
        cpu, runnable = spent
        return runnable >= 0.0095 if runnable >= 0 else cpu > 0.006  # Linux's schedstat, or CPU time

    async def times(tool: str, i: int) -> tuple[float, float]:
        result = await rt.call(call(tool, json.dumps({"a": i}), id=f"{tool}{i}"))
        assert result.ok, result
        assert result.value["a"] == i
        return float(result.value["cpu"]), float(result.value["runnable"])

    async def rounds(tool: str, until_one_polled: bool) -> tuple[list[tuple[float, float]], list[float]]:
        after_burst: list[tuple[float, float]] = []
        after_sparse: list[float] = []
        while len(after_burst) < 3 or (
            until_one_polled and not any(map(polled, after_burst)) and len(after_burst) < 10
        ):
            for i in range(5):
                last = await times(tool, i)  # back to back: each came within the window (unless starved)
            await trio.sleep(0.2)
            late = await times(tool, 5)  # came 0.2 s after the reply: the poll before it ran out
            after_burst.append((late[0] - last[0], late[1] - last[1]))
            await trio.sleep(0.2)
            after_sparse.append((await times(tool, 6))[0] - late[0])
        return after_burst, after_sparse

    async with open_runtime([getattr(pt, name), pt.drowsy], tracing=False) as rt:
        burst, sparse = await rounds(name, until_one_polled=True)
        asleep_burst, asleep_sparse = await rounds("drowsy", until_one_polled=False)
    assert all(cpu < 0.1 for cpu, _ in burst), burst  # the window ends
    assert any(map(polled, burst)), burst  # it polled (a whole window)
    assert all(cpu < 0.003 for cpu in sparse), sparse
    asleep = [cpu for cpu, _ in asleep_burst] + asleep_sparse
    assert all(cpu < 0.003 for cpu in asleep), asleep
