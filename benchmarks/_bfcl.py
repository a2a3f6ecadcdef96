"""The Berkeley Function Calling Leaderboard's function docs, pooled into one tool catalog.

The data ships in the PyPI wheel `bfcl-eval` (pinned below). `fetch()` downloads it once with
`pip download --no-deps` into `.cache/bfcl/` (git-ignored) and reads the JSON lines straight
from the wheel; nothing of it is committed.

The catalog: every distinct function doc (by its whole JSON) of the eight Python categories
that have answers (simple, multiple, parallel, parallel_multiple and their `live_` forms):
2,405 docs. A name is made to fit every provider (`.` and other characters become `_`), and
a name shared by two different docs gets `_2`, `_3`... The queries: each entry's user
message; its answer: each function the ground truth calls (an entry that calls two
functions gives two query/answer pairs).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION = "2026.3.23"
CACHE = Path(__file__).resolve().parent.parent / ".cache" / "bfcl"
CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None, "list": "array"}


@dataclass(frozen=True)
class Doc:
    name: str  # unique in the catalog, fits every provider
    original: str  # the name BFCL gives it
    description: str
    schema: dict[str, Any]  # the parameters as a JSON Schema object


@dataclass(frozen=True)
class Query:
    id: str
    text: str
    answer: str  # the name of the right tool in the catalog

    @property
    def half(self) -> str:
        """ "tuning" or "held-out": a fixed split of the entries in two halves (by the CRC-32 of
        the entry's id, so an entry's several answers stay together). Whatever was chosen by
        measuring (weights, thresholds) was chosen on the tuning half; the held-out half says
        how it does on requests it was not chosen on."""
        return "tuning" if zlib.crc32(self.id.encode()) % 2 == 0 else "held-out"


def fetch() -> Path:
    """The wheel, downloaded on first use (PyPI, `pip download --no-deps`)."""
    wheel = CACHE / f"bfcl_eval-{VERSION}-py3-none-any.whl"
    if not wheel.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"bfcl-eval=={VERSION}",
                "--no-deps",
                "-q",
                "-d",
                str(CACHE),
            ],
            check=True,
        )
    return wheel


def _lines(archive: zipfile.ZipFile, name: str) -> Iterator[dict[str, Any]]:
    for line in archive.read(f"bfcl_eval/data/{name}").decode("utf-8").splitlines():
        if line.strip():
            yield json.loads(line)


def json_schema(node: Any) -> Any:
    """BFCL's parameter types ("dict", "float", "tuple", "any") as JSON Schema."""
    if isinstance(node, list):
        return [json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, str):
            kind = _TYPES.get(value, value.lower())
            if kind is not None:
                out["type"] = kind
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {k: json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
            out[key] = json_schema(value)
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" in out and isinstance(out.get("required"), list):
        out["required"] = [r for r in out["required"] if r in out["properties"]]
    return out


def load() -> tuple[list[Doc], list[Query]]:
    """The pooled catalog and its queries."""
    docs: dict[str, Doc] = {}  # whole JSON of the doc -> Doc
    taken: set[str] = set()
    queries: list[Query] = []
    with zipfile.ZipFile(fetch()) as archive:
        for category in CATEGORIES:
            answers = {
                a["id"]: a["ground_truth"]
                for a in _lines(archive, f"possible_answer/BFCL_v4_{category}.json")
            }
            for entry in _lines(archive, f"BFCL_v4_{category}.json"):
                by_original: dict[str, Doc] = {}
                for fn in entry["function"]:
                    key = json.dumps(fn, sort_keys=True)
                    doc = docs.get(key)
                    if doc is None:
                        base = re.sub(r"[^a-zA-Z0-9_-]", "_", fn["name"])[:60]
                        name, n = base, 1
                        while name in taken:
                            n += 1
                            name = f"{base}_{n}"
                        taken.add(name)
                        doc = docs[key] = Doc(
                            name=name,
                            original=fn["name"],
                            description=fn.get("description") or "",
                            schema=json_schema(fn.get("parameters") or {"type": "object"}),
                        )
                    by_original[fn["name"]] = doc
                text = "\n".join(
                    m["content"] for m in entry["question"][0] if m.get("role") == "user" and m.get("content")
                )
                wanted: list[str] = []
                for call in answers[entry["id"]]:
                    for original in call:
                        if original in by_original and by_original[original].name not in wanted:
                            wanted.append(by_original[original].name)
                queries.extend(Query(id=entry["id"], text=text, answer=w) for w in wanted)
    return list(docs.values()), queries


if __name__ == "__main__":
    catalog, qs = load()
    print(f"{len(catalog)} docs, {len(qs)} query/answer pairs")
