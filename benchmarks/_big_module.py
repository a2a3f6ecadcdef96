"""A generated module of about 4,000 lines of classes, as a generated API client has: W3 on it.

Building a tool whose parameter's class lives in such a module once parsed the whole module
to find the class's attribute docstrings (20 ms and more a tool); each measurement here
builds tools on classes it has never seen, in a module made for it, so no cache helps.
"""

from __future__ import annotations

import gc
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from runtime import tool

_made = 0


def make_module(lines: int = 4000) -> tuple[ModuleType, int]:
    """A fresh module of `lines` lines (classes with attribute docstrings); its number of classes."""
    global _made
    _made += 1
    out = ['"""A big generated module."""', "from __future__ import annotations", "", "import msgspec", ""]
    n = 0
    while len(out) < lines:
        out += [
            f"class Model{n}(msgspec.Struct):",
            f'    """Model number {n}."""',
            "",
            "    name: str",
            '    """The name."""',
            "    count: int = 0",
            '    """How many."""',
            "    tags: list[str] = []",
            "",
            "    def describe(self) -> str:",
            '        return f"{self.name}"',
            "",
            "",
        ]
        n += 1
    name = f"_bench_big_module_{_made}"
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text("\n".join(out) + "\n")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module, n


def _search_on(cls: Any) -> Any:
    def search(query: Any, page: int = 1) -> list[str]:
        """Search."""
        return []

    search.__annotations__ = {"query": cls, "page": int, "return": list[str]}
    return search


def build_on_big_module(count: int = 200) -> float:
    """Median microseconds to build a tool (and its descriptor) on a class not seen before."""
    module, n = make_module()
    classes = [getattr(module, f"Model{i}") for i in range(min(count, n))]
    gc.collect()
    times = []
    for cls in classes:
        fn = _search_on(cls)
        start = time.perf_counter()
        tool(fn).descriptor  # noqa: B018 - building it is the point
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def first_on_big_module() -> float:
    """Microseconds for the first tool on a fresh 4,000-line module (its source is read then)."""
    module, _ = make_module()
    fn = _search_on(module.Model7)
    gc.collect()
    start = time.perf_counter()
    tool(fn).descriptor  # noqa: B018
    return (time.perf_counter() - start) * 1e6


class _Warm(msgspec.Struct):
    a: int


tool(_search_on(_Warm))  # what the first tool of a process pays once (imports, caches) is not W3's
