"""`ToolIndex`: tools found by what they do, kept up to date one tool at a time.

The ranking is BM25F: BM25 over one document per tool whose fields count with weights (a
word of the name counts more than a word of a parameter's description). Each field is read
up to a bound, so a tool with a huge description is one long document like others, not one
that matches every query (nor one whose length buries it); a tool with no description is
still found by its name and parameters.

The postings are compact arrays (a tool id and a weighted count per entry, 8 bytes), appended
in id order: adding a tool appends to the arrays of its terms, removing one marks its id dead
(its entries are skipped, and a term's arrays are rewritten once half of them are dead).
Nothing is ever rebuilt from scratch, and an update costs the terms of that one tool.

A query is bounded: its first `QUERY_CHARS` characters, its `QUERY_TERMS` first distinct
terms. Its terms are read rarest first; once the candidates found so far fill the results,
a term held by more than a tenth of the tools only adds to the candidates it shares (a tool
matching nothing but common words cannot be among the best), which keeps a query over
hundreds of thousands of tools within milliseconds.

Everything here is guarded by one lock: a registry may be searched from several threads
(`RuntimeThread`) while the runtime's thread updates it.
"""

from __future__ import annotations

import heapq
import math
import threading
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator

import msgspec

from ..schema import Array, Enum, Object, ToolDescriptor, TypeNode, Union
from ._text import terms

__all__ = ["QUERY_CHARS", "QUERY_TERMS", "IndexStatistics", "ToolIndex", "document_terms"]

QUERY_CHARS = 8192
"""A query is read up to this many characters (a 1 MB message costs what 8 KB does)."""
QUERY_TERMS = 64
"""...and up to this many distinct terms."""

# Field weights and the most terms read of each field.
NAME_WEIGHT, NAME_TERMS = 3.0, 32
DESCRIPTION_WEIGHT, DESCRIPTION_TERMS = 1.0, 400
PARAMETER_WEIGHT, PARAMETER_TERMS = 1.5, 128
PARAMETER_TEXT_WEIGHT, PARAMETER_TEXT_TERMS = 0.5, 800
ENUM_WEIGHT, ENUM_TERMS = 0.5, 200

K1 = 1.2
B = 0.75
PIVOT = 40.0  # the length (weighted terms) a tool's counts are normalised to: about the usual tool's
REPEAT = 0.8  # a term's weight once a result holds it (see `_diverse`)
NAME_BONUS = 2.0
POOL = 30
FULL_TERMS = 16  # the rarest terms of a query whose every posting is read...
FULL_POSTINGS = 16_000  # ...as long as they hold no more postings than this in all;
REFINE = 256  # the other terms only add to this many best candidates so far


class IndexStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """An immutable snapshot of an index's size.

    Attributes:
        tools: tools indexed.
        terms: distinct terms.
        postings: (term, tool) entries, dead ones included.
        dead: entries of removed tools not yet rewritten away.
    """

    tools: int
    terms: int
    postings: int
    dead: int


def document_terms(descriptor: ToolDescriptor) -> tuple[dict[str, float], float, tuple[str, ...]]:
    """The weighted count of each term of a tool, its weighted length, and its name's terms."""
    counts: dict[str, float] = {}
    length = 0.0

    def add(text: str | None, weight: float, bound: int, digits: bool = True) -> int:
        nonlocal length
        if not text or bound <= 0:
            return 0
        found = terms(text[: bound * 32], limit=bound)  # a huge text is read no further
        if not digits:  # in a name, digits count versions and copies: `Weather_1`, `search_2`
            found = [t for t in found if not t.isdigit()]
        for term in found:
            counts[term] = counts.get(term, 0.0) + weight
        length += weight * len(found)
        return len(found)

    add(descriptor.name, NAME_WEIGHT, NAME_TERMS, digits=False)
    named = tuple(counts)
    add(descriptor.title, NAME_WEIGHT, NAME_TERMS)
    add(descriptor.description, DESCRIPTION_WEIGHT, DESCRIPTION_TERMS)
    budgets = {"names": PARAMETER_TERMS, "texts": PARAMETER_TEXT_TERMS, "enums": ENUM_TERMS}
    for name, description, node in _parameters(descriptor):
        budgets["names"] -= add(name, PARAMETER_WEIGHT, budgets["names"])
        budgets["texts"] -= add(description, PARAMETER_TEXT_WEIGHT, budgets["texts"])
        if isinstance(node, Enum):
            text = " ".join(str(v) for v in node.values if isinstance(v, str))
            budgets["enums"] -= add(text, ENUM_WEIGHT, budgets["enums"])
    return counts, length, named


def _parameters(descriptor: ToolDescriptor) -> Iterator[tuple[str, str | None, TypeNode]]:
    """Every parameter and nested property, breadth first: (name, description, type)."""
    queue: list[tuple[str, str | None, TypeNode]] = [
        (p.name, p.description, p.type) for p in descriptor.parameters
    ]
    seen = 0
    while seen < len(queue) and seen < 256:
        name, description, node = queue[seen]
        seen += 1
        yield name, description or node.description, node
        for child in _children(node):
            if isinstance(child, Object):
                queue.extend((p.name, p.description, p.type) for p in child.properties)
            elif isinstance(child, Enum):
                queue.append(("", child.description, child))


def _children(node: TypeNode) -> Iterator[TypeNode]:
    if isinstance(node, Object):
        yield node
    elif isinstance(node, Array):
        yield from _children(node.items)
    elif isinstance(node, Union):
        for option in node.options:
            yield from _children(option)
    elif isinstance(node, Enum):
        return


class _Postings:
    __slots__ = ("dead", "ids", "weights")

    def __init__(self) -> None:
        self.ids = array("i")
        self.weights = array("f")
        self.dead = 0


class ToolIndex:
    """A search index over tool descriptors, updated one tool at a time.

    ```python
    index = ToolIndex(registry.descriptors())
    index.search("what's the weather in Paris", limit=3)   # ['get_weather', ...] best first
    index.add(new_descriptor)                              # or replace the tool of that name
    index.remove("old_tool")
    ```
    """

    __slots__ = (
        "_count",
        "_descriptors",
        "_ids",
        "_lengths",
        "_lock",
        "_name_terms",
        "_names",
        "_postings",
        "_terms",
        "_total",
        "version",
    )

    def __init__(self, descriptors: Iterable[ToolDescriptor] = ()) -> None:
        self._lock = threading.Lock()
        self._postings: dict[str, _Postings] = {}
        self._ids: dict[str, int] = {}  # name -> id of its live document
        self._names: list[str | None] = []  # id -> name, None once removed
        self._descriptors: list[ToolDescriptor | None] = []
        self._terms: list[tuple[str, ...]] = []  # id -> its terms (to mark them dead)
        self._name_terms: list[tuple[str, ...]] = []  # id -> the terms of its name
        self._lengths = array("f")
        self._count = 0
        self._total = 0.0
        self.version = 0  # counts the changes: who shares the index can tell it moved on
        for descriptor in descriptors:
            self._add(descriptor)

    def __len__(self) -> int:
        return self._count

    def __contains__(self, name: object) -> bool:
        return name in self._ids

    def add(self, descriptor: ToolDescriptor) -> None:
        """Index a tool; one already indexed under its name is replaced."""
        with self._lock:
            self._add(descriptor)
            self.version += 1

    def remove(self, name: str) -> bool:
        """Forget the tool called `name`; False if it was not indexed."""
        with self._lock:
            self.version += 1
            return self._remove(name)

    def update(self, added: Iterable[ToolDescriptor] = (), removed: Iterable[str] = ()) -> None:
        """Remove `removed`, then add (or replace) `added`, under one lock."""
        with self._lock:
            for name in removed:
                self._remove(name)
            for descriptor in added:
                self._add(descriptor)
            self.version += 1

    def statistics(self) -> IndexStatistics:
        """How big the index is now."""
        with self._lock:
            return IndexStatistics(
                tools=self._count,
                terms=len(self._postings),
                postings=sum(len(p.ids) for p in self._postings.values()),
                dead=sum(p.dead for p in self._postings.values()),
            )

    def search(
        self, query: str, *, limit: int = 5, admit: Callable[[str, ToolDescriptor], bool] | None = None
    ) -> list[ToolDescriptor]:
        """The descriptors of the tools that best match `query`, best first, at most `limit`.

        Args:
            admit: only tools for which `admit(name, descriptor)` is true are returned (a view's
                tools); scores are those of the whole index.
        """
        if limit <= 0 or not isinstance(query, str):
            return []
        wanted = list(dict.fromkeys(terms(query[:QUERY_CHARS], limit=QUERY_TERMS)))
        if not wanted:
            return []
        with self._lock:
            ranked = self._rank(wanted, limit, admit)
            return [d for _, i in ranked if (d := self._descriptors[i]) is not None]

    # -- inside the lock -------------------------------------------------------------

    def _add(self, descriptor: ToolDescriptor) -> None:
        name = descriptor.name
        if name in self._ids:
            self._remove(name)
        counts, length, named = document_terms(descriptor)
        doc = len(self._names)
        self._names.append(name)
        self._descriptors.append(descriptor)
        self._terms.append(tuple(counts))
        self._name_terms.append(named)
        self._lengths.append(length)
        self._ids[name] = doc
        self._count += 1
        self._total += length
        postings = self._postings
        norm = K1 * (1.0 - B + B * length / PIVOT)
        for term, tf in counts.items():
            entry = postings.get(term)
            if entry is None:
                entry = postings[term] = _Postings()
            entry.ids.append(doc)
            entry.weights.append((K1 + 1.0) * tf / (tf + norm))

    def _remove(self, name: str) -> bool:
        doc = self._ids.pop(name, None)
        if doc is None:
            return False
        self._names[doc] = None
        self._descriptors[doc] = None
        self._count -= 1
        self._total -= self._lengths[doc]
        for term in self._terms[doc]:
            entry = self._postings[term]
            entry.dead += 1
            if entry.dead * 2 > len(entry.ids):
                self._compact(term, entry)
        self._terms[doc] = self._name_terms[doc] = ()
        return True

    def _compact(self, term: str, entry: _Postings) -> None:
        names = self._names
        keep = [i for i, doc in enumerate(entry.ids) if names[doc] is not None]
        if not keep:
            del self._postings[term]
            return
        entry.ids = array("i", (entry.ids[i] for i in keep))
        entry.weights = array("f", (entry.weights[i] for i in keep))
        entry.dead = 0

    def _rank(
        self, wanted: list[str], limit: int, admit: Callable[[str, ToolDescriptor], bool] | None
    ) -> list[tuple[float, int]]:
        n = self._count
        if n == 0:
            return []
        found: list[tuple[int, str, _Postings]] = []
        for term in wanted:
            entry = self._postings.get(term)
            if entry is not None and len(entry.ids) > entry.dead:
                found.append((len(entry.ids) - entry.dead, term, entry))
        found.sort(key=lambda f: f[0])  # rarest first
        names = self._names
        pool = max(limit, POOL)
        scores: dict[int, float] = {}
        spent = 0
        for rank, (df, _term, entry) in enumerate(found):
            idf = _idf(n, df)
            ids, weights = entry.ids, entry.weights
            if scores and (rank >= FULL_TERMS or spent + df > FULL_POSTINGS):
                # Past the rare terms: a term only adds to the best candidates found so far
                # (a tool that has only common words of the query is not among the best).
                if len(scores) > REFINE:
                    scores = {
                        doc: scores[doc] for doc in heapq.nlargest(REFINE, scores, key=scores.__getitem__)
                    }
                size = len(ids)
                for doc in scores:
                    at = bisect_left(ids, doc)
                    if at < size and ids[at] == doc:
                        scores[doc] += idf * weights[at]
                continue
            spent += len(ids)
            get = scores.get
            if entry.dead:
                for doc, w in zip(ids, weights, strict=True):
                    if names[doc] is not None:
                        scores[doc] = get(doc, 0.0) + idf * w
            else:
                for doc, w in zip(ids, weights, strict=True):
                    scores[doc] = get(doc, 0.0) + idf * w
        if admit is None:
            best = heapq.nlargest(pool, scores, key=scores.__getitem__)
        else:
            descriptors = self._descriptors
            ordered = sorted(scores, key=scores.__getitem__, reverse=True)
            shown = (doc for doc in ordered if (d := descriptors[doc]) is not None and admit(d.name, d))
            best = [doc for _, doc in zip(range(pool), shown, strict=False)]
        return self._diverse(best, {t: (df, e) for df, t, e in found}, limit)

    def _diverse(
        self, best: list[int], found: dict[str, tuple[int, _Postings]], limit: int
    ) -> list[tuple[float, int]]:
        """The best `limit` of the candidates `best`, picked one at a time.

        A candidate's worth is what each query term gives it, a term counting `REPEAT` times
        less for each tool already picked that holds it, plus `NAME_BONUS` times the share of
        its name (by weight) the query holds. So a query asking for two things gets tools for
        both, five copies of one tool do not crowd out the rest, and of two tools that match
        alike the one the query names wins.
        """
        n = self._count
        parts: list[dict[str, float]] = []
        bonus: list[float] = []
        for doc in best:
            mine: dict[str, float] = {}
            for term in self._terms[doc]:
                hit = found.get(term)
                if hit is not None:
                    df, entry = hit
                    mine[term] = _idf(n, df) * entry.weights[bisect_left(entry.ids, doc)]
            parts.append(mine)
            total = held = 0.0
            for term in self._name_terms[doc]:
                entry = self._postings[term]
                weight = _idf(n, len(entry.ids) - entry.dead)
                total += weight
                if term in found:
                    held += weight
            bonus.append(NAME_BONUS * held / total if total else 0.0)
        covered: dict[str, int] = {}
        left = list(range(len(best)))
        picked: list[tuple[float, int]] = []
        while left and len(picked) < limit:
            worth = {
                i: bonus[i] + sum(v * REPEAT ** covered.get(t, 0) for t, v in parts[i].items()) for i in left
            }
            i = max(left, key=lambda i: (worth[i], -i))
            left.remove(i)
            picked.append((worth[i], best[i]))
            for term in parts[i]:
                covered[term] = covered.get(term, 0) + 1
        return picked


def _idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))
