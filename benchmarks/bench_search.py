"""Tool search on a large real catalog: the BFCL function docs pooled (benchmarks/_bfcl.py).

Quality: each user message is the query; a hit is a result that is the function the answer
calls (any of the catalog's docs of that BFCL function: the pool holds several versions of
many of them), and, stricter, that exact doc. Recall at 1/5/10 and MRR, for
`ToolRegistry.search`, a plain BM25 (textbook Okapi, k1=1.5, b=0.75, over lower-cased
alphanumeric words of name, description, parameter names and descriptions) and
pydantic-ai's local search (`keywords_search`, the `ToolSearch` fallback), in the same run; on
all requests and on each half of a fixed split (`_bfcl.Query.half`): the search's constants
were chosen on the tuning half, the held-out half was not looked at to choose them. An
ablation turns each ranking idea off in turn.

Speed, at 1x, 10x and 100x the catalog (the docs repeated with perturbed names): index build
time and memory; a search's latency p50/p99 as a server sees it (wall clock, the garbage
collector on, each request once), the same with the collector off during the timed loop, and
its CPU time (`time.thread_time`: what the search itself costs, without the time this shared
machine's other processes take the core from it; the load average is recorded); one tool's
update (replaced in place) the same ways; the plain BM25's latency in the same loop as a
baseline. Tokens (o200k_base, via benchmarks/_tokens.py): the tools payload sent whole vs
deferred.
"""

from __future__ import annotations

import collections
import gc
import json
import math
import os
import random
import re
import time
import tracemalloc
from typing import Any

import msgspec

from runtime.schema import ToolDescriptor, descriptor_from_json_schema, render_tool
from runtime.search import ToolIndex, ToolSearch, _index, deferred_schemas

from . import _bfcl, _tokens
from ._harness import Report

_WORD = re.compile(r"[a-z0-9]+")


class PlainBM25:
    """The baseline: Okapi BM25 over one bag of words per tool, nothing else."""

    def __init__(self, descriptors: list[ToolDescriptor], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.names = [d.name for d in descriptors]
        bags = [collections.Counter(_WORD.findall(_text(d).lower())) for d in descriptors]
        self.lengths = [sum(c.values()) for c in bags]
        self.avg = sum(self.lengths) / len(self.lengths)
        self.postings: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
        for i, bag in enumerate(bags):
            for term, count in bag.items():
                self.postings[term].append((i, count))

    def search(self, query: str, limit: int) -> list[str]:
        n = len(self.names)
        scores: dict[int, float] = collections.defaultdict(float)
        for term in set(_WORD.findall(query.lower())):
            hits = self.postings.get(term)
            if not hits:
                continue
            idf = math.log(1 + (n - len(hits) + 0.5) / (len(hits) + 0.5))
            for i, f in hits:
                norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avg)
                scores[i] += idf * f * (self.k1 + 1) / (f + norm)
        best = sorted(scores.items(), key=lambda s: -s[1])[:limit]
        return [self.names[i] for i, _ in best]


def _text(d: ToolDescriptor) -> str:
    parts = [d.name.replace("_", " ").replace(".", " "), d.description]
    for p in d.parameters:
        parts += [p.name, p.description or ""]
    return " ".join(parts)


def _pydantic_ai(descriptors: list[ToolDescriptor]) -> Any:
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets._tool_search import keywords_search

    defs = [
        ToolDefinition(
            name=d.name,
            description=d.description,
            parameters_json_schema=render_tool(d, "jsonschema")["parameters"],
        )
        for d in descriptors
    ]
    return lambda query, limit: keywords_search(None, [query], defs)[:limit]  # type: ignore[arg-type]


def quality(search: Any, queries: list[_bfcl.Query], original: dict[str, str]) -> dict[str, float]:
    hits = {"function": collections.Counter[int](), "doc": collections.Counter[int]()}
    for q in queries:
        found = search(q.text, 10)
        for kind, key in (("function", original), ("doc", None)):
            shown = [key[n] for n in found] if key else found
            want = key[q.answer] if key else q.answer
            if want in shown:
                hits[kind][shown.index(want) + 1] += 1
    n = len(queries)
    out: dict[str, float] = {}
    for kind, ranks in hits.items():
        for k in (1, 5, 10):
            out[f"{kind}_recall@{k}"] = round(sum(c for r, c in ranks.items() if r <= k) / n, 4)
        out[f"{kind}_mrr"] = round(sum(c / r for r, c in ranks.items()) / n, 4)
    return out


def scaled(descriptors: list[ToolDescriptor], times: int) -> list[ToolDescriptor]:
    """The catalog `times` over, each copy's names perturbed (`name_r3_1207`)."""
    out = list(descriptors)
    for i in range(1, times):
        out.extend(
            msgspec.structs.replace(d, name=f"{d.name[:48]}_r{i}_{j}") for j, d in enumerate(descriptors)
        )
    return out


# The queries any search must answer within its bound (each gets a list; tests/test_search.py).
EDGE_QUERIES = {
    "empty": "",
    "stop words only": "what is it that you can do for me",
    "1 MB ascii": "weather " * 131_072,
    "1 MB chinese": "我想知道上海目前的天气状况" * 80_000,
    "1 MB korean": "날씨가 어때요 " * 150_000,
    "1 MB thai": "ช่วยหาบริการรีดผ้า" * 60_000,
    "chinese": "我想知道上海目前的天气状况\uff0c可以帮我查询吗\uff1f",  # full-width comma, question mark
    "korean": "최근 박지성에 관한 뉴스를 찾아줘.",
    "thai": "ช่วยหาคุณแม่บ้านที่ให้บริการรีดผ้า",
}


def _percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "p50_ms": round(ordered[len(ordered) // 2] * 1e3, 3),
        "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1e3, 3),
        "max_ms": round(ordered[-1] * 1e3, 3),
    }


def _timed(
    run: Any, items: list[Any], *, collect: bool, floor: Any = None
) -> tuple[list[float], list[float], list[float]]:
    """Wall and CPU seconds of `run(item)` for each item, the garbage collector on or off; and,
    interleaved (one after each item), the wall seconds of `floor()`."""
    wall, cpu, floors = [], [], []
    if not collect:
        gc.disable()
    try:
        for item in items:
            start, used = time.perf_counter(), time.thread_time()
            run(item)
            cpu.append(time.thread_time() - used)
            wall.append(time.perf_counter() - start)
            if floor is not None:
                start = time.perf_counter()
                floor()
                floors.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return wall, cpu, floors


def _fixed_work(seconds: float) -> Any:
    """A function of pure Python arithmetic that takes about `seconds` of CPU: the floor a search
    of that median cost is timed against (its wall-clock tail is this machine's, not a search's)."""

    def work(n: int) -> int:
        total = 0
        for i in range(n):
            total += i * i
        return total

    n = 10_000
    start = time.thread_time()
    work(n)
    spent = max(time.thread_time() - start, 1e-6)
    n = max(1, int(n * seconds / spent))
    return lambda: work(n)


def speed(
    descriptors: list[ToolDescriptor], queries: list[_bfcl.Query], times: int, quick: bool
) -> dict[str, Any]:
    tools = scaled(descriptors, times)
    gc.collect()
    start = time.perf_counter()
    index = ToolIndex(tools)
    build = time.perf_counter() - start
    del index
    gc.collect()
    tracemalloc.start()
    index = ToolIndex(tools)
    memory = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    texts = [q.text for q in (queries if not quick else queries[:300])]
    load_before = os.getloadavg()[0]
    search = lambda text: index.search(text, limit=5)  # noqa: E731
    _, warm, _ = _timed(search, texts[:200], collect=True)
    floor = _fixed_work(sorted(warm)[len(warm) // 2])
    wall, cpu, floor_wall = _timed(search, texts, collect=True, floor=floor)  # as a server sees it
    wall_no_gc, _, _ = _timed(search, texts, collect=False)
    edge = {name: [] for name in EDGE_QUERIES}  # each odd query, 9 times
    for _ in range(9):
        for name, text in EDGE_QUERIES.items():
            start = time.perf_counter()
            index.search(text, limit=5)
            edge[name].append(time.perf_counter() - start)
    rng = random.Random(44)
    changed = rng.sample(tools, 300)
    update_wall, update_cpu, _ = _timed(index.add, changed, collect=True)  # replaces the tool of that name
    out: dict[str, Any] = {
        "tools": len(tools),
        "build_s": round(build, 3),
        "memory_mb": round(memory / 1e6, 1),
        "postings": index.statistics().postings,
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "search_wall": _percentiles(wall),
        "search_wall_gc_off": _percentiles(wall_no_gc),
        "search_cpu": _percentiles(cpu),
        "fixed_work_wall": _percentiles(floor_wall),
        "update_wall": _percentiles(update_wall),
        "update_cpu": _percentiles(update_cpu),
        "edge_median_ms": {name: round(sorted(t)[len(t) // 2] * 1e3, 3) for name, t in edge.items()},
    }
    if times <= 10:  # the baseline reads every posting of every term: at 100x, seconds a query
        del index
        baseline = PlainBM25(tools)
        base_wall, base_cpu, _ = _timed(lambda text: baseline.search(text, 5), texts, collect=True)
        out["plain_bm25_wall"] = _percentiles(base_wall)
        out["plain_bm25_cpu"] = _percentiles(base_cpu)
    return out


def tokens(descriptors: list[ToolDescriptor]) -> dict[str, Any]:
    encoding = _tokens.encoding()

    def count(tools: list[dict[str, Any]]) -> int:
        return len(encoding.encode(json.dumps(tools, separators=(",", ":"), ensure_ascii=False)))

    search = ToolSearch()
    everything = {
        p: count([render_tool(d, p) for d in descriptors])
        for p in ("openai-responses", "openai", "anthropic")
    }
    five = [d.name for d in descriptors[:5]]  # what one search loads into the local form
    anthropic = deferred_schemas(descriptors, "anthropic", search)
    deferred = {
        # What the model's context holds: Anthropic keeps `defer_loading` tools out of it.
        "anthropic (client)": count([t for t in anthropic if not t.get("defer_loading")]),
        "openai-responses (client)": count(deferred_schemas(descriptors, "openai-responses", search)),
        "openai chat (local, 5 loaded)": count(deferred_schemas(descriptors, "openai", search, loaded=five)),
        "gemini (local, 5 loaded)": count(deferred_schemas(descriptors, "gemini", search, loaded=five)),
    }
    base = {"anthropic (client)": "anthropic", "openai-responses (client)": "openai-responses"}
    return {
        "everything": everything,
        "deferred": deferred,
        "fewer": {k: round(1 - v / everything[base.get(k, "openai")], 4) for k, v in deferred.items()},
    }


# Each ranking idea, off (the constants of runtime.search._index that turn it off).
ABLATIONS: dict[str, dict[str, float]] = {
    "without the same-name demotion": {"SAME_NAME": 1.0},
    "without description phrases": {"PHRASE_QUERY_WEIGHT": 0.0},
    "without asks (one query per message)": {"ASK_POOL": 0, "ASK_TERMS": 0},
}


def halves(search: Any, queries: list[_bfcl.Query], original: dict[str, str]) -> dict[str, dict[str, float]]:
    """`quality` on all requests and on each half of the split."""
    out = {"all": quality(search, queries, original)}
    for half in ("tuning", "held-out"):
        out[half] = quality(search, [q for q in queries if q.half == half], original)
    return out


def ablation(index: ToolIndex, queries: list[_bfcl.Query], original: dict[str, str]) -> dict[str, Any]:
    """Recall@5 (all, held-out) with each idea off in turn."""
    search = lambda q, k: [d.name for d in index.search(q, limit=k)]  # noqa: E731
    out: dict[str, Any] = {}
    for name, constants in {"all ideas on": {}, **ABLATIONS}.items():
        saved = {k: getattr(_index, k) for k in constants}
        for k, v in constants.items():
            setattr(_index, k, v)
        try:
            found = halves(search, queries, original)
        finally:
            for k, v in saved.items():
                setattr(_index, k, v)
        out[name] = {half: found[half]["function_recall@5"] for half in ("all", "held-out")}
    return out


def main(*, quick: bool = False) -> Report:
    docs, queries = _bfcl.load()
    descriptors = [descriptor_from_json_schema(d.name, d.description, d.schema) for d in docs]
    original = {d.name: d.original for d in docs}
    index = ToolIndex(descriptors)  # what ToolRegistry.search builds on its first search
    subjects = {
        "ToolRegistry.search": lambda q, k: [d.name for d in index.search(q, limit=k)],
        "plain BM25": PlainBM25(descriptors).search,
        "pydantic-ai keywords": _pydantic_ai(descriptors),
    }
    report = Report("search")
    report.extra["catalog"] = {
        "tools": len(descriptors),
        "query_answer_pairs": len(queries),
        "tuning": sum(q.half == "tuning" for q in queries),
        "held_out": sum(q.half == "held-out" for q in queries),
    }
    report.extra["quality"] = {name: halves(fn, queries, original) for name, fn in subjects.items()}
    report.extra["ablation"] = ablation(index, queries, original)
    report.extra["speed"] = [
        speed(descriptors, queries, times, quick) for times in ((1, 10) if quick else (1, 10, 100))
    ]
    report.extra["tokens"] = tokens(descriptors)
    return report


def show(report: Report) -> None:
    print(f"\n== {report.name} == {report.extra['catalog']}")
    print(
        f"{'search':<24} {'half':<9} {'r@1':>6} {'r@5':>6} {'r@10':>6} {'MRR':>6}   (exact doc: r@1 r@5 r@10 MRR)"
    )
    for name, by_half in report.extra["quality"].items():
        for half, q in by_half.items():
            print(
                f"{name:<24} {half:<9} {q['function_recall@1']:>6.3f} {q['function_recall@5']:>6.3f} "
                f"{q['function_recall@10']:>6.3f} {q['function_mrr']:>6.3f}   "
                f"{q['doc_recall@1']:.3f} {q['doc_recall@5']:.3f} {q['doc_recall@10']:.3f} {q['doc_mrr']:.3f}"
            )
    for name, r in report.extra["ablation"].items():
        print(f"  recall@5 {name}: {r['all']:.4f} (held-out {r['held-out']:.4f})")
    for s in report.extra["speed"]:
        w, g, c = s["search_wall"], s["search_wall_gc_off"], s["search_cpu"]
        print(
            f"{s['tools']:>7} tools: build {s['build_s']} s, {s['memory_mb']} MB, load {s['load_average']}; "
            f"search p50/p99 ms wall {w['p50_ms']}/{w['p99_ms']}, gc off {g['p50_ms']}/{g['p99_ms']}, "
            f"cpu {c['p50_ms']}/{c['p99_ms']}; update wall {s['update_wall']['p50_ms']}/"
            f"{s['update_wall']['p99_ms']}, cpu {s['update_cpu']['p50_ms']}/{s['update_cpu']['p99_ms']}"
        )
        f = s["fixed_work_wall"]
        print(f"          fixed work of the median search's CPU, wall p50/p99 {f['p50_ms']}/{f['p99_ms']}")
        print(f"          odd queries, median ms: {s['edge_median_ms']}")
        if "plain_bm25_wall" in s:
            b, bc = s["plain_bm25_wall"], s["plain_bm25_cpu"]
            print(
                f"          plain BM25 search wall {b['p50_ms']}/{b['p99_ms']}, cpu {bc['p50_ms']}/{bc['p99_ms']}"
            )
    t = report.extra["tokens"]
    print(f"tokens sent whole: {t['everything']}")
    for k, v in t["deferred"].items():
        print(f"  deferred {k}: {v} tokens ({t['fewer'][k]:.1%} fewer)")


if __name__ == "__main__":
    result = main(quick=False)
    show(result)
    print(f"wrote {result.save()}")
