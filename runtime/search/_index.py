"""`ToolIndex`: tools found by what they do, kept up to date one tool at a time.

The ranking is BM25F: BM25 over one document per tool whose fields count with weights (a
word of the name counts more than a word of a parameter's description). Each field is read
up to a bound, so a tool with a huge description is one long document like others, not one
that matches every query (nor one whose length buries it); a tool with no description is
still found by its name and parameters. Two words that follow each other in a description
are also indexed as a phrase (`current weather`), so a query holding the phrase ranks the
tool that says it above one that holds both words apart.

The postings are compact arrays kept sorted by tool id (a tool id and a weighted count per
entry, 8 bytes). A new tool appends to the arrays of its terms; a replaced one keeps its id
and its entries are updated, inserted or deleted where they are; a removed one's entries are
deleted. Each of these is a bisection and a memory move done by `array` in C: an update
costs the terms of that one tool, never a rewrite of a list in Python, and nothing is ever
rebuilt from scratch.

A query is bounded: its first `QUERY_CHARS` characters, its first `QUERY_TERMS` terms. Its
terms are read rarest first; past the rarest few (`FULL_TERMS` terms, `FULL_POSTINGS`
entries), a common term only adds to the best candidates found so far (a tool matching
nothing but common words cannot be among the best), which keeps a query over hundreds of
thousands of tools within milliseconds. A message that asks for several things in several
sentences has each sentence's own best tools considered too (see `ToolIndex._rank`). A view's
search (`admit`) keeps its own tools before any cut: tools it does not see take no room among
the best, and when the rarest terms find few of its tools, the next terms are read in full for
them (within `VIEW_POSTINGS` entries).

A view that re-describes tools (a `prepare`) searches the index as it shows them (`shown`): a
copy-on-write overlay of the index in which those tools' entries are made from the descriptors
it shows, so a word it took out of a description finds nothing, and one it added is found. The
overlay copies only the postings of those tools' terms, and follows the index as it changes.

Everything here is guarded by one lock: a registry may be searched from several threads
(`RuntimeThread`) while the runtime's thread updates it.
"""

from __future__ import annotations

import heapq
import math
import sys
import threading
from array import array
from bisect import bisect_left
from collections import ChainMap
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from itertools import compress, islice, pairwise
from operator import neg
from typing import Generic, TypeVar

import msgspec

from ..schema import Array, Enum, Object, ToolDescriptor, TypeNode, Union
from ._text import sentences, terms

__all__ = ["QUERY_CHARS", "QUERY_TERMS", "IndexStatistics", "ToolIndex", "document_terms"]

QUERY_CHARS = 8192
"""A query is read up to this many characters (a 1 MB message costs what 8 KB does)."""
QUERY_TERMS = 64
"""...and up to this many terms."""

# Field weights and the most terms read of each field.
NAME_WEIGHT, NAME_TERMS = 3.0, 32
DESCRIPTION_WEIGHT, DESCRIPTION_TERMS = 1.0, 400
PARAMETER_WEIGHT, PARAMETER_TERMS = 1.5, 128
PARAMETER_TEXT_WEIGHT, PARAMETER_TEXT_TERMS = 0.5, 800
ENUM_WEIGHT, ENUM_TERMS = 0.5, 200
PHRASE_WEIGHT = 0.5  # a pair of words next to each other in the description, per occurrence
PHRASE_QUERY_WEIGHT = 0.5  # ...and in the query: a phrase adds to its words, never outweighs them

K1 = 1.2
B = 0.75
PIVOT = 40.0  # the length (weighted terms) a tool's counts are normalised to: about the usual tool's
REPEAT = 0.8  # a term's weight once a result holds it (see `_diverse`)
NAME_BONUS = 2.0
SAME_NAME = 0.6  # a tool named as one already picked (`weather_get`, `weather_get_2`) counts this much
POOL = 30  # the candidates the results are picked from...
ASK_POOL = 3  # ...and, for a message of several asks, each ask's own best
FULL_TERMS = 16  # the rarest terms of a query whose every posting is read...
FULL_POSTINGS = 8_000  # ...as long as they hold no more postings than this in all;
REFINE = 128  # the other terms only add to this many best candidates so far
VIEW_POSTINGS = 64_000  # a view reads the next terms in full for its tools up to this many entries
ASK_TERMS = 3  # an ask's rarest terms read in full, even past `FULL_TERMS`
SHOWN_KEPT = 16  # the views' overlays an index keeps (each holds only its re-described tools' postings)


class IndexStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """An immutable snapshot of an index's size.

    Attributes:
        tools: tools indexed.
        terms: distinct terms (words and phrases).
        postings: (term, tool) entries.
    """

    tools: int
    terms: int
    postings: int


def document_terms(descriptor: ToolDescriptor) -> tuple[dict[str, float], float, tuple[str, ...]]:
    """The weighted count of each term of a tool, its weighted length, and its name's terms."""
    counts: dict[str, float] = {}
    length = 0.0

    def add(text: str | None, weight: float, bound: int, digits: bool = True) -> list[str]:
        nonlocal length
        if not text or bound <= 0:
            return []
        found = terms(text[: bound * 32], limit=bound)  # a huge text is read no further
        if not digits:  # in a name, digits count versions and copies: `Weather_1`, `search_2`
            found = [t for t in found if not t.isdigit()]
        for term in found:
            counts[term] = counts.get(term, 0.0) + weight
        length += weight * len(found)
        return found

    add(descriptor.name, NAME_WEIGHT, NAME_TERMS, digits=False)
    named = tuple(counts)
    add(descriptor.title, NAME_WEIGHT, NAME_TERMS)
    described = add(descriptor.description, DESCRIPTION_WEIGHT, DESCRIPTION_TERMS)
    for pair in _phrases(described):
        counts[pair] = counts.get(pair, 0.0) + PHRASE_WEIGHT
    budgets = {"names": PARAMETER_TERMS, "texts": PARAMETER_TEXT_TERMS, "enums": ENUM_TERMS}
    for name, description, node in _parameters(descriptor):
        budgets["names"] -= len(add(name, PARAMETER_WEIGHT, budgets["names"]))
        budgets["texts"] -= len(add(description, PARAMETER_TEXT_WEIGHT, budgets["texts"]))
        if isinstance(node, Enum):
            text = " ".join(str(v) for v in node.values if isinstance(v, str))
            budgets["enums"] -= len(add(text, ENUM_WEIGHT, budgets["enums"]))
    return counts, length, named


def _phrases(sequence: list[str]) -> Iterator[str]:
    """Each two terms next to each other, as one term (`"current weather"`): words of the
    scripts written without spaces are already pairs of characters, and are left alone."""
    for a, b in pairwise(sequence):
        if a.isascii() and b.isascii():
            yield sys.intern(f"{a} {b}")  # one string for every tool that holds the phrase


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


class Query(msgspec.Struct, frozen=True):
    """A query as the index reads it.

    Attributes:
        weights: each term (and phrase) of the query, with its weight.
        asks: the terms of each sentence that asks for something (two terms or more), when
            there are two such sentences or more; else empty.
    """

    weights: dict[str, float]
    asks: tuple[frozenset[str], ...]

    @classmethod
    def parse(cls, text: str) -> Query:
        text = text[:QUERY_CHARS]
        sequence: list[str] = []
        asks: list[frozenset[str]] = []
        for sentence in sentences(text):
            found = terms(sentence, limit=QUERY_TERMS - len(sequence), stop_words_only=False)
            sequence += found
            ask = frozenset(found)
            if len(ask) >= 2 and ask not in asks:
                asks.append(ask)
            if len(sequence) >= QUERY_TERMS:
                break
        if not sequence:  # only stop words: search with them
            sequence = terms(text, limit=QUERY_TERMS)
        weights = dict.fromkeys(sequence, 1.0)
        for pair in _phrases(sequence):
            weights.setdefault(pair, PHRASE_QUERY_WEIGHT)
        return cls(weights, tuple(asks) if len(asks) > 1 else ())


class _Postings:
    __slots__ = ("ids", "weights")

    def __init__(self) -> None:
        self.ids = array("i")  # ascending
        self.weights = array("f")


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
        "_lock",
        "_name_terms",
        "_names",
        "_overlays",
        "_postings",
        "_terms",
        "version",
    )

    def __init__(self, descriptors: Iterable[ToolDescriptor] = ()) -> None:
        self._lock = threading.Lock()
        self._postings: MutableMapping[str, _Postings] = {}
        self._ids: dict[str, int] = {}  # name -> id of its document
        self._names: list[str | None] = []  # id -> name, None once removed
        self._descriptors: list[ToolDescriptor | None] = []
        self._terms: list[tuple[str, ...]] = []  # id -> its terms (to find its entries)
        self._name_terms: list[tuple[str, ...]] = []  # id -> the terms of its name
        self._count = 0
        self.version = 0  # counts the changes: who shares the index can tell it moved on
        self._overlays: dict[int, _ShownIndex] = {}  # of the views searched lately, by id(shown)
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
            )

    def search(
        self,
        query: str,
        *,
        limit: int = 5,
        admit: Callable[[str, ToolDescriptor], bool] | None = None,
        shown: Mapping[str, ToolDescriptor] | None = None,
    ) -> list[ToolDescriptor]:
        """The descriptors of the tools that best match `query`, best first, at most `limit`.

        Args:
            admit: only tools for which `admit(name, descriptor)` is true are candidates (a
                view's tools: admitted before the best are cut, so hidden tools that outrank
                them take no room); scores are those of the whole index.
            shown: the descriptors a view shows in place of the indexed ones of those names
                (its `prepare`'s): ranked by what they say, and returned. Keep the same mapping
                while the view is the same: the overlay made for it is kept for the next search.
        """
        if limit <= 0 or not isinstance(query, str):
            return []
        parsed = Query.parse(query)
        if not parsed.weights:
            return []
        with self._lock:
            index = self._shown_as(shown) if shown else self
            ranked = index._rank(parsed, limit, admit)
            return [d for _, i in ranked if (d := index._descriptors[i]) is not None]

    # -- inside the lock -------------------------------------------------------------

    def _shown_as(self, shown: Mapping[str, ToolDescriptor]) -> ToolIndex:
        """This index as a view shows it (its overlay, made again if the index moved on)."""
        overlays = self._overlays
        overlay = overlays.get(id(shown))
        if overlay is None or overlay.shown is not shown:
            if len(overlays) >= SHOWN_KEPT:
                del overlays[next(iter(overlays))]  # the oldest
            overlay = overlays[id(shown)] = _ShownIndex(self, shown)
        overlay.follow()
        return overlay

    def _add(self, descriptor: ToolDescriptor) -> None:
        doc = self._ids.get(descriptor.name)
        if doc is not None:
            self._replace(doc, descriptor)
            return
        # A new tool: its id is the largest, its entries go last.
        counts, length, named = document_terms(descriptor)
        norm = K1 * (1.0 - B + B * length / PIVOT)
        doc = len(self._names)
        self._ids[descriptor.name] = doc
        self._names.append(descriptor.name)
        self._descriptors.append(descriptor)
        self._terms.append(tuple(counts))
        self._name_terms.append(named)
        self._count += 1
        postings = self._postings
        for term, tf in counts.items():
            entry = postings.get(term)
            if entry is None:
                entry = postings[term] = _Postings()
            entry.ids.append(doc)
            entry.weights.append((K1 + 1.0) * tf / (tf + norm))

    def _replace(self, doc: int, descriptor: ToolDescriptor) -> None:
        """Index `descriptor` as the tool `doc`: it keeps its id, each of its entries is changed
        where it is."""
        counts, length, named = document_terms(descriptor)
        norm = K1 * (1.0 - B + B * length / PIVOT)
        for term in self._terms[doc]:
            if term not in counts:
                self._delete(term, doc)
        for term, tf in counts.items():
            weight = (K1 + 1.0) * tf / (tf + norm)
            entry = self._writable(term)
            ids = entry.ids
            at = bisect_left(ids, doc)
            if at < len(ids) and ids[at] == doc:
                entry.weights[at] = weight
            else:
                ids.insert(at, doc)
                entry.weights.insert(at, weight)
        self._descriptors[doc] = descriptor
        self._terms[doc] = tuple(counts)
        self._name_terms[doc] = named

    def _remove(self, name: str) -> bool:
        doc = self._ids.pop(name, None)
        if doc is None:
            return False
        for term in self._terms[doc]:
            self._delete(term, doc)
        self._names[doc] = None
        self._descriptors[doc] = None
        self._terms[doc] = self._name_terms[doc] = ()
        self._count -= 1
        return True

    def _writable(self, term: str) -> _Postings:
        """The postings of `term`, to change (made if it has none)."""
        entry = self._postings.get(term)
        if entry is None:
            entry = self._postings[term] = _Postings()
        return entry

    def _delete(self, term: str, doc: int) -> None:
        entry = self._writable(term)
        at = bisect_left(entry.ids, doc)
        del entry.ids[at]
        del entry.weights[at]
        if not entry.ids:
            self._forget(term)

    def _forget(self, term: str) -> None:
        del self._postings[term]

    def _rank(
        self, query: Query, limit: int, admit: Callable[[str, ToolDescriptor], bool] | None
    ) -> list[tuple[float, int]]:
        """The best `limit` tools for `query`: (worth, id), best first.

        A message that asks for several things, one sentence each ("convert 100 euros to
        dollars. Then tell me the time in Tokyo."), is one query whose best candidates may all
        answer its longest ask. So each sentence's rarest terms are also scored on their own,
        and the best tools of each ask join the candidates the results are picked from (where
        the re-rank's coverage of the query's terms favours an ask not answered yet).
        """
        n = self._count
        if n == 0:
            return []
        found: list[tuple[int, str, _Postings, float]] = []
        for term, weight in query.weights.items():
            entry = self._postings.get(term)
            if entry is not None and entry.ids:  # (a view's overlay keeps a term it emptied, empty)
                found.append((len(entry.ids), term, entry, weight))
        if not found:
            return []
        found.sort(key=lambda f: f[0])  # rarest first
        # Each term read in full adds to the scores of the ask it is first found in (or to
        # the rest); the whole query's scores are their sum.
        asks = query.asks
        owner: dict[str, int] = {}
        for i, terms_of_ask in enumerate(asks):
            for term in terms_of_ask:
                owner.setdefault(term, i)
        buckets: list[dict[int, float]] = [{} for _ in range(len(asks) + 1)]
        spent = 0
        read = [0] * len(asks)
        common: list[tuple[int, str, _Postings, float]] = []
        for rank, (df, term, entry, weight) in enumerate(found):
            ask = owner.get(term, -1)
            # Past the rarest terms, only each ask's own rarest are read in full (within the
            # same bound of postings).
            past = spent and (rank >= FULL_TERMS or spent + df > FULL_POSTINGS)
            if past and (ask < 0 or read[ask] >= ASK_TERMS or spent + df > FULL_POSTINGS):
                common.append(found[rank])
                continue
            if ask >= 0:
                read[ask] += 1
            spent += df
            idf = _idf(n, df) * weight
            _add_to(buckets[ask], dict(zip(entry.ids, map(idf.__mul__, entry.weights), strict=True)))
        scores = buckets[-1]
        if asks:  # the asks' own scores are kept for their candidates (below)
            scores = dict(scores)
            for bucket in buckets[:-1]:
                _add_to(scores, bucket)
        keep = None if admit is None else self._admitted(admit)
        admitted = False  # the scores hold only tools `keep` admits
        if common:
            # Past the rare terms: a term only adds to the best candidates found so far (a
            # tool that has only common words of the query is not among the best).
            if keep is not None:
                # A view's candidates are its own tools, before the cut (hidden tools that
                # outrank them take no room); while it has fewer than REFINE of them, the next
                # rarest terms are read in full for its tools (up to VIEW_POSTINGS entries):
                # a view's tool that holds only words the hidden tools hold too is found.
                scores = dict(_top(scores, REFINE, keep))
                admitted = True
                budget = VIEW_POSTINGS
                while common and len(scores) < REFINE and common[0][0] <= budget:
                    df, _term, entry, weight = common.pop(0)
                    budget -= df
                    idf = _idf(n, df) * weight
                    for doc, w in zip(entry.ids, entry.weights, strict=True):
                        if doc in scores:
                            scores[doc] += idf * w
                        elif keep(doc):
                            scores[doc] = idf * w
            if len(scores) > REFINE:
                scores = dict(_top(scores, REFINE))
            for df, _term, entry, weight in common:
                idf = _idf(n, df) * weight
                ids, weights = entry.ids, entry.weights
                if df <= 4 * len(scores):  # fewer entries than bisections: read them
                    for doc, w in zip(ids, weights, strict=True):
                        if doc in scores:
                            scores[doc] += idf * w
                    continue
                for doc in scores:
                    at = bisect_left(ids, doc)
                    if at < df and ids[at] == doc:
                        scores[doc] += idf * weights[at]
        pool = [doc for doc, _ in _top(scores, max(limit, POOL), None if admitted else keep)]
        if asks:
            seen = set(pool)
            for bucket in buckets[:-1]:
                pool += [doc for doc, _ in _top(bucket, ASK_POOL, keep) if doc not in seen]
                seen.update(pool)
        return self._diverse(pool, {t: (_idf(n, df) * w, e) for df, t, e, w in found}, limit)

    def _admitted(self, admit: Callable[[str, ToolDescriptor], bool]) -> Callable[[int], bool]:
        names, descriptors = self._names, self._descriptors
        asked: dict[int, bool] = {}  # a view's filter is asked once per tool and query

        def keep(doc: int) -> bool:
            answer = asked.get(doc)
            if answer is None:
                name, d = names[doc], descriptors[doc]  # its name, whatever a view shows it as
                answer = asked[doc] = name is not None and d is not None and admit(name, d)
            return answer

        return keep

    def _diverse(
        self,
        pool: list[int],
        found: dict[str, tuple[float, _Postings]],
        limit: int,
    ) -> list[tuple[float, int]]:
        """The best `limit` of the candidates `pool`, picked one at a time.

        A candidate's worth is what each query term gives it, a term counting `REPEAT` times
        less for each tool already picked that holds it, plus `NAME_BONUS` times the share of
        its name (by weight) the query holds; a tool whose name says what a picked one's says
        (`get_weather_2` after `get_weather`) counts `SAME_NAME` times less. So a query asking
        for two things gets tools for both, five copies of one tool do not crowd out the rest,
        and of two tools that match alike the one the query names wins.
        """
        n = self._count
        parts: list[dict[str, float]] = []  # candidate -> what each query term gives it
        holders: dict[str, list[int]] = {}  # query term -> the candidates holding it
        worth: list[float] = []
        rarity: dict[str, float] = {}  # the idf of each name term met
        for i, doc in enumerate(pool):
            mine: dict[str, float] = {}
            for term in sorted(found.keys() & self._terms[doc]):  # the loop over its terms in C
                idf, entry = found[term]
                mine[term] = idf * entry.weights[bisect_left(entry.ids, doc)]
                holders.setdefault(term, []).append(i)
            parts.append(mine)
            total = held = 0.0
            for term in self._name_terms[doc]:
                weight = rarity.get(term)
                if weight is None:
                    weight = rarity[term] = _idf(n, len(self._postings[term].ids))
                total += weight
                if term in found:
                    held += weight
            worth.append((NAME_BONUS * held / total if total else 0.0) + sum(mine.values()))
        keys = [self._name_terms[doc] for doc in pool]
        covered: dict[str, int] = {}
        named: dict[tuple[str, ...], int] = {}
        left = list(range(len(pool)))
        picked: list[tuple[float, int]] = []
        while left and len(picked) < limit:
            best, value = -1, -1.0
            for i in left:
                v = worth[i] * SAME_NAME ** named[keys[i]] if keys[i] in named else worth[i]
                if v > value:
                    best, value = i, v
            left.remove(best)
            picked.append((value, best))
            named[keys[best]] = named.get(keys[best], 0) + 1
            for term in parts[best]:  # each holder of a term now covered gets less of it
                times = covered.get(term, 0)
                cut = REPEAT**times * (1.0 - REPEAT)
                for i in holders[term]:
                    worth[i] -= parts[i][term] * cut
                covered[term] = times + 1
        return [(value, pool[i]) for value, i in picked]


T = TypeVar("T")


class _Patched(Generic[T]):
    """A list read through a few changed items (an overlay's view of its index's lists)."""

    __slots__ = ("base", "changed")

    def __init__(self, base: list[T]) -> None:
        self.base = base
        self.changed: dict[int, T] = {}

    def __getitem__(self, i: int) -> T:
        changed = self.changed
        return changed[i] if i in changed else self.base[i]

    def __setitem__(self, i: int, value: T) -> None:
        self.changed[i] = value


class _ShownIndex(ToolIndex):
    """An index as a view shows it: the tools of `shown` indexed by what it shows of them.

    Copy on write: the postings of their terms (old and new) are copies, the rest is the
    index's own; a term they no longer hold keeps an empty entry (which hides the index's). It
    shares its index's lock, and is made again by `follow` whenever the index has changed.
    """

    __slots__ = ("_base", "_followed", "_owned", "shown")

    def __init__(self, base: ToolIndex, shown: Mapping[str, ToolDescriptor]) -> None:
        self._base = base
        self.shown = shown
        self._lock = base._lock
        self._followed = -1
        self._overlays = {}
        self.version = 0

    def follow(self) -> None:
        """Catch up with the index (inside its lock)."""
        base = self._base
        if self._followed == base.version:
            return
        self._owned: dict[str, _Postings] = {}
        self._postings = ChainMap(self._owned, base._postings)
        self._ids, self._names, self._count = base._ids, base._names, base._count
        self._descriptors = _Patched(base._descriptors)  # type: ignore[assignment]  # read and set by index
        self._terms = _Patched(base._terms)  # type: ignore[assignment]
        self._name_terms = _Patched(base._name_terms)  # type: ignore[assignment]
        for name, descriptor in self.shown.items():
            doc = base._ids.get(name)
            if doc is not None and base._descriptors[doc] is not descriptor:
                self._replace(doc, descriptor)  # by the name it holds (whatever the one it shows)
        self._followed = base.version

    def _writable(self, term: str) -> _Postings:
        entry = self._owned.get(term)
        if entry is None:
            entry = self._owned[term] = _Postings()
            found = self._base._postings.get(term)
            if found is not None:
                entry.ids, entry.weights = found.ids[:], found.weights[:]
        return entry

    def _forget(self, term: str) -> None:
        pass  # its empty entry hides the index's


def _add_to(scores: dict[int, float], more: dict[int, float]) -> None:
    """Add `more` to `scores`: the ids in both are summed in Python, the others are inserted by
    `dict.update` in C (most of a term's tools are new to the scores of the others)."""
    both = {doc: scores[doc] + more[doc] for doc in scores.keys() & more.keys()}
    scores.update(more)
    scores.update(both)


def _at_least(scores: dict[int, float], k: int) -> dict[int, float]:
    """A part of `scores` that holds its `k` best: the entries of a sample's top share and above,
    filtered in C (no Python call per entry), or all of `scores` if the sample misjudged it."""
    size = len(scores)
    step = size // 256
    if step < 4:
        return scores
    sample = sorted(islice(scores.values(), 0, None, step), reverse=True)
    line = sample[min(len(sample) - 1, 2 * k // step + 1)]  # about 2k entries are at least this
    ids = list(compress(scores, map(line.__le__, scores.values())))
    return {doc: scores[doc] for doc in ids} if len(ids) >= k else scores


def _top(
    scores: dict[int, float], k: int, keep: Callable[[int], bool] | None = None
) -> list[tuple[int, float]]:
    """The `k` best (id, score) of `scores`, best first (ties: the lower id), of those `keep` admits."""
    wanted = k if keep is None else k * 4
    admitted: list[tuple[int, float]] = []
    asked = 0
    while True:
        some = _at_least(scores, wanted)
        pairs = zip(some.values(), map(neg, some), strict=True)  # no Python call per entry
        best = (
            sorted(pairs, reverse=True)[:wanted] if wanted * 8 >= len(some) else heapq.nlargest(wanted, pairs)
        )
        if keep is None:
            return [(-negative, score) for score, negative in best]
        # A view's filter is a call per candidate: ask it of the best first, widening as needed
        # (the best of a wider round begin with those of the last: each is asked once).
        admitted += [(-negative, score) for score, negative in islice(best, asked, None) if keep(-negative)]
        asked = len(best)
        if len(admitted) >= k or asked < wanted:
            return admitted[:k]
        wanted *= 4


def _idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))
