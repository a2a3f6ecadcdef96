"""BFCL's multi-turn ground truth, as programs: code mode leaves the same state and results as the
same calls made one by one.

The Berkeley Function Calling Leaderboard's multi-turn categories (base, long context, missing
function, missing parameter) each hold 200 cases: an initial state of its executable API classes
(a file system, a trading bot, a travel agency, a vehicle...) and, per user turn, the calls a
correct model makes. For every case, two fresh copies of its classes are loaded with its initial
state and their public methods become tools (`tool(instance.method)`); then, turn by turn:

- one by one: each ground-truth call is a `rt.call`, in order;
- code mode: the turn's calls are one program run by `run_code` (each call awaited in order, its
  failure caught), through a second runtime.

`make test` takes every 20th case of each category (10 of 200), `make test-slow` all of them.
After each turn the two copies' states (BFCL's own check: every public attribute) and the
calls' results (values, or the failure's text) must be equal. `test_bfcl_report` prints the
counts (`pytest -s`), with how many turns leave another state than BFCL's own executor does
(`eval` of each call, untyped): a few of BFCL's annotations are wrong (`close_ticket(ticket_id:
int)` is called with "ticket_001"; `compute_exchange_rate -> float` returns a dict), and the
runtime, which decodes arguments and checks results by them, refuses those calls, either way.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bfcl_data
import msgspec
import pytest

from runtime import ToolCall, ToolFailure, ToolSuccess, open_runtime, tool
from runtime.code import ProgramResult, code_mode

CATEGORIES = ("base", "long_context", "miss_func", "miss_param")
REPORT: dict[str, list[int]] = {}  # category -> [cases, turns, calls, failed, mismatches, unlike BFCL's run]


def _root() -> Path:
    root = bfcl_data.ensure()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return root / "bfcl_eval" / "data"


def _cases(category: str) -> Iterator[dict[str, Any]]:
    data = _root()
    questions = (data / f"BFCL_v4_multi_turn_{category}.json").read_text().splitlines()
    answers = (data / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json").read_text().splitlines()
    truth = {entry["id"]: entry["ground_truth"] for entry in map(json.loads, answers)}
    for line in questions:
        case = json.loads(line)
        case["ground_truth"] = truth[case["id"]]
        yield case


class World:
    """Fresh instances of a case's classes, loaded with its initial state; their methods as tools."""

    def __init__(self, case: dict[str, Any], long_context: bool) -> None:
        from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES

        self.instances: dict[str, Any] = {}
        self.methods: dict[str, Any] = {}
        for name in case["involved_classes"]:
            instance = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[name]), name)()
            if name not in STATELESS_CLASSES:
                config = copy.deepcopy(case["initial_config"].get(name, {}))
                instance._load_scenario(config, long_context=long_context)
            self.instances[name] = instance
            for method_name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method_name.startswith("_"):
                    self.methods[method_name] = method  # as BFCL's executor: a later class wins

    def tools(self) -> list[Any]:
        return [tool(method) for method in self.methods.values()]

    def state(self) -> dict[str, dict[str, Any]]:
        """BFCL's state check: every public attribute of every instance."""
        return {
            name: {k: v for k, v in vars(instance).items() if not k.startswith("_")}
            for name, instance in self.instances.items()
        }

    def parse(self, text: str) -> tuple[str, dict[str, Any]]:
        """A ground-truth call (`cd(folder='x')`, positional arguments too) as a name and keywords."""
        node = ast.parse(text.strip(), mode="eval").body
        assert isinstance(node, ast.Call), text
        assert isinstance(node.func, ast.Name), text
        name = node.func.id
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
        if node.args:
            params = [p for p in inspect.signature(self.methods[name]).parameters if p not in kwargs]
            kwargs.update({p: ast.literal_eval(a) for p, a in zip(params, node.args, strict=False)})
        return name, kwargs


def _plain(value: Any) -> Any:
    """A value as JSON sees it (a program gets a tool's value in this form)."""
    return msgspec.json.decode(msgspec.json.encode(value, enc_hook=str))


def _one(result: Any) -> Any:
    if isinstance(result, ToolFailure):
        return {"error": result.content}
    assert isinstance(result, ToolSuccess)
    return _plain(result.value)


def _program(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """A turn's calls as the program a model would write: each awaited in turn, failures kept."""
    lines = ["results = []"]
    for name, kwargs in calls:
        arguments = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        lines += [
            "try:",
            f"    results.append(await {name}({arguments}))",
            "except Exception as e:",
            "    results.append({'error': str(e)})",
        ]
    lines.append("results")
    return "\n".join(lines)


EVERY = 20
"""`make test` runs every 20th case of each category (10 of 200); `make test-slow` runs them all."""


@pytest.mark.parametrize("category", CATEGORIES)
async def test_ground_truth_as_programs_leaves_the_same_state_and_results(category: str) -> None:
    await _ground_truth_as_programs(category, every=EVERY)


@pytest.mark.slow
@pytest.mark.parametrize("category", CATEGORIES)
async def test_all_of_the_ground_truth_as_programs_leaves_the_same_state_and_results(category: str) -> None:
    await _ground_truth_as_programs(category, every=1)


async def _ground_truth_as_programs(category: str, every: int) -> None:
    run_code = code_mode(timeout=60.0, max_calls=1000)
    cases_of = list(_cases(category))[::every]  # fetches the wheel, puts it on sys.path
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

    cases = turns = calls = failed = unlike_bfcl = 0
    mismatches: list[str] = []
    for case in cases_of:
        long_context = category == "long_context"
        one, code = World(case, long_context), World(case, long_context)
        bfcl_instances: dict[str, Any] = {}
        async with (
            open_runtime(one.tools(), tracing=False) as direct,
            open_runtime([*code.tools(), run_code], tracing=False) as coded,
        ):
            for t, turn in enumerate(case["ground_truth"]):
                parsed = [one.parse(c) for c in turn]
                expected = []
                for i, (name, kwargs) in enumerate(parsed):
                    result = await direct.call(ToolCall(id=f"{t}.{i}", name=name, arguments=kwargs))
                    expected.append(_one(result))
                ran = await coded.call(
                    ToolCall(id=f"turn{t}", name="run_code", arguments={"code": _program(parsed)})
                )
                assert isinstance(ran, ToolSuccess), f"{case['id']} turn {t}: {ran}"
                assert isinstance(ran.value, ProgramResult)
                got = [
                    r if isinstance(r, dict) and set(r) == {"error"} else _plain(r) for r in ran.value.result
                ]
                if got != expected:
                    mismatches.append(f"{case['id']} turn {t}: results {got} != {expected}")
                if code.state() != one.state():
                    mismatches.append(f"{case['id']} turn {t}: the states differ")
                # And both as BFCL's own executor (`eval` of each call on its instances) leaves them.
                _, bfcl_instances = execute_multi_turn_func_call(
                    turn,
                    case["initial_config"],
                    case["involved_classes"],
                    "tool_runtime_code_mode",
                    f"{category}_{case['id']}",
                    long_context=long_context,
                )
                bfcl_state = {
                    name: {k: v for k, v in vars(i).items() if not k.startswith("_")}
                    for name, i in bfcl_instances.items()
                }
                if bfcl_state != one.state():  # the runtime checks BFCL's annotations; its eval does not
                    unlike_bfcl += 1
                failed += sum(isinstance(r, dict) and set(r) == {"error"} for r in expected)
                turns += 1
                calls += len(parsed)
        cases += 1
    REPORT[category] = [cases, turns, calls, failed, len(mismatches), unlike_bfcl]
    assert cases == 200 // every
    assert mismatches == []


def test_bfcl_report() -> None:
    """Prints the counts of the runs above (`pytest -s`)."""
    for category, (cases, turns, calls, failed, mismatches, unlike) in REPORT.items():
        print(
            f"BFCL multi_turn_{category}: {cases} cases, {turns} turns, {calls} calls "
            f"({failed} answered with an error, the same both ways), {mismatches} mismatches; "
            f"{unlike} turns leave another state than BFCL's own untyped run"
        )
