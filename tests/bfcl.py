"""The Berkeley Function Calling Leaderboard's multi-turn API classes, driven by its own ground truth.

The `bfcl-eval` wheel (2026.3.23) holds the classes (`GorillaFileSystem`, `MessageAPI`,
`TradingBot`...: real code, with the loose return annotations real code has) and, for each
multi-turn entry, the calls a correct model makes. `make bfcl` downloads the wheel into
`.cache/bfcl` and unpacks it (the data is never committed); `BFCL_DIR` names another folder.

`run(category, ...)` makes each entry's classes twice from its initial state: one set is called
directly, the other through a runtime whose tools are `tool(instance.method)`, call by call in
the same order, and reports both answers of every call, and both sets' final states.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import importlib
import inspect
import json
import os
import sys
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bfcl_data
import msgspec

from runtime import ToolCall, ToolRegistry, ToolResult, open_runtime, tool

CATEGORIES = ("base", "long_context", "miss_func", "miss_param")
ROOT = Path(os.environ.get("BFCL_DIR") or bfcl_data.ROOT / f"bfcl_eval-{bfcl_data.VERSION}")  # bfcl_data's
DATA = ROOT / "bfcl_eval" / "data"


def available() -> bool:
    if not os.environ.get("BFCL_DIR"):
        bfcl_data.ensure()  # fetched once (make bfcl), as tests/test_code_bfcl.py does
    return (DATA / "possible_answer" / "BFCL_v4_multi_turn_base.json").is_file()


@dataclass
class Called:
    """One ground-truth call, answered both ways."""

    entry: str
    name: str
    arguments: dict[str, Any]
    direct: Any  # what the method returned (a copy made then: the classes return their own state)
    readable: Any  # and how BFCL's own harness shows it to a model (JSON, else `str()`), made then
    raised: BaseException | None  # or what it raised
    result: ToolResult  # what the runtime answered
    value: Any  # its value, copied then
    fits: bool  # the arguments are of the method's declared parameter types


@dataclass
class Run:
    calls: list[Called] = field(default_factory=list)
    states_differ: list[str] = field(default_factory=list)  # entries whose classes ended apart
    type_mismatches: int = 0  # the runtimes' statistics(), summed


def _entries(category: str) -> Iterator[tuple[dict[str, Any], list[list[str]]]]:
    questions = DATA / f"BFCL_v4_multi_turn_{category}.json"
    answers = DATA / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json"
    truth = {}
    for line in answers.read_text().splitlines():
        row = json.loads(line)
        truth[row["id"]] = row["ground_truth"]
    for line in questions.read_text().splitlines():
        entry = json.loads(line)
        yield entry, truth[entry["id"]]


def _instances(entry: dict[str, Any], long_context: bool) -> dict[str, Any]:
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES

    made = {}
    for name in entry["involved_classes"]:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[name]), name)
        instance = cls()
        if name not in STATELESS_CLASSES:
            scenario = copy.deepcopy(entry["initial_config"].get(name, {}))
            instance._load_scenario(scenario, long_context=long_context)
        made[name] = instance
    return made


def _methods(instances: dict[str, Any]) -> dict[str, Any]:
    return {
        name: method
        for instance in instances.values()
        for name, method in inspect.getmembers(instance, predicate=inspect.ismethod)
        if not name.startswith("_")
    }


def _parse(text: str, method: Any) -> dict[str, Any]:
    """`name(a, b=2)` -> {"a": ..., "b": 2}, positional arguments named by the signature."""
    node = ast.parse(text, mode="eval").body
    assert isinstance(node, ast.Call)
    names = list(inspect.signature(method).parameters)
    arguments = dict(zip(names, (ast.literal_eval(a) for a in node.args), strict=False))
    arguments.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None})
    return arguments


def _fits(method: Any, arguments: dict[str, Any]) -> bool:
    """Whether each argument is of its parameter's declared type (JSON's view: an int is a float)."""
    hints = typing.get_type_hints(method)
    try:
        for name, value in arguments.items():
            if name in hints:
                msgspec.convert(value, hints[name], strict=False)
    except msgspec.ValidationError:
        return False
    return True


@contextlib.contextmanager
def _importable() -> Iterator[None]:
    sys.path.insert(0, str(ROOT))
    try:
        yield
    finally:
        sys.path.remove(str(ROOT))


async def run(category: str, *, limit: int | None = None, **options: Any) -> Run:
    """Every ground-truth call of `category`'s entries (the first `limit`), both ways.

    `options` are tool options for every tool (`strict_result=True`).
    """
    done = Run()
    with _importable():
        for n, (entry, turns) in enumerate(_entries(category)):
            if limit is not None and n >= limit:
                break
            long_context = category == "long_context"
            direct = _instances(entry, long_context)
            served = _instances(entry, long_context)
            methods = _methods(direct)
            registry = ToolRegistry([tool(m, **options) for m in _methods(served).values()])
            async with open_runtime(registry, tracing=False) as rt:
                for turn in turns:
                    for text in turn:
                        method = methods[ast.parse(text, mode="eval").body.func.id]  # type: ignore[attr-defined]
                        arguments = _parse(text, method)
                        raised: BaseException | None = None
                        value: Any = None
                        try:
                            value = copy.deepcopy(method(**copy.deepcopy(arguments)))
                        except Exception as exc:
                            raised = exc
                        # `str()` of an mpmath number depends on the precision set by the last call
                        readable = (
                            value if isinstance(value, str) else json.loads(json.dumps(value, default=str))
                        )
                        result = await rt.call(
                            ToolCall(
                                id=str(len(done.calls)), name=method.__name__, arguments=json.dumps(arguments)
                            )
                        )
                        shown = copy.deepcopy(result.value) if result.ok else None
                        done.calls.append(
                            Called(
                                entry["id"],
                                method.__name__,
                                arguments,
                                value,
                                readable,
                                raised,
                                result,
                                shown,
                                _fits(method, arguments),
                            )
                        )
                done.type_mismatches += sum(t.type_mismatches for t in rt.statistics().tools.values())
            from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import state_checker

            if not state_checker(served, direct)["valid"]:  # BFCL's own check of the classes' state
                done.states_differ.append(entry["id"])
    return done
