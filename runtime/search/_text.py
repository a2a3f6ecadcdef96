"""Text into search terms, the same way for a tool's description and a user's query.

- Identifiers are split where people see words: `get_current_weather`, `ChaDri.change_drink`,
  `getHTTPResponse`, `list-files` give `get current weather`, `cha dri change drink`, `get http
  response`, `list files`.
- Words are lower-cased, their accents dropped (`Käärijä` -> `kaarija`), and English ones cut
  to a stem (`calculates`, `calculating`, `calculated` -> `calcul`) by a few suffix rules (a
  light stemmer: it never merges words that share only a prefix).
- English stop words are left out, unless nothing else is left (a query of only stop words
  is searched with them).
- Scripts written without spaces between words (Chinese, Japanese, Korean, Thai, Lao, Khmer,
  Myanmar) become overlapping pairs of characters (`天气状况` -> `天气 气状 状况`), which
  match the same words in a description without a dictionary.
- Digits stay as terms (`404`, `2024`), split from the letters around them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

__all__ = ["STOP_WORDS", "WORD_CHARS", "sentences", "stem", "terms"]

# The marks that belong to letters (Thai and Indic vowel signs, combining accents, Hebrew and
# Arabic points): `re` does not count them as word characters.
_MARKS = (
    "\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed"
    "\u0900-\u0dff\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3099\u309a"
)
# Letters and digits of any script, with their marks; a run is cut every 256 characters (no word
# is longer, and a query of 8 KB of Chinese is then read only as far as its first terms). ASCII
# words are cut the same way: no term is longer than `WORD_CHARS`.
WORD_CHARS = 256
_RUN = re.compile(rf"(?:[^\W_]|[{_MARKS}]){{1,{WORD_CHARS}}}")
_ASCII_PART = re.compile(  # camelCase, HTTPServer, x86
    rf"[A-Z]{{1,{WORD_CHARS}}}(?![a-z])|[A-Z]?[a-z]{{1,{WORD_CHARS - 1}}}|[0-9]{{1,{WORD_CHARS}}}"
)
_SCRIPT_PART = re.compile(rf"\d+|(?:[^\W\d_]|[{_MARKS}])+")  # digits, or the rest

# Ranges of the scripts written without spaces between words: CJK ideographs (and their
# extensions and compatibility forms), Hiragana, Katakana, Hangul, Thai, Lao, Khmer, Myanmar.
_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3100-\u312f\u3130-\u318f"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]"
)

STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "done",
        "down",
        "during",
        "each",
        "either",
        "else",
        "etc",
        "few",
        "for",
        "from",
        "further",
        "get",
        "gets",
        "got",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "let",
        "like",
        "may",
        "me",
        "might",
        "more",
        "most",
        "must",
        "my",
        "myself",
        "need",
        "needs",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "per",
        "please",
        "same",
        "shall",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "upon",
        "us",
        "use",
        "used",
        "uses",
        "using",
        "very",
        "via",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "within",
        "without",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "want",
        "wants",
        "i'd",
        "i'm",
        "can't",
        "don't",
    ]
)
"""English words that say nothing about what a tool does ("get" included: most tools get something)."""


def terms(text: str, *, limit: int | None = None, stop_words_only: bool = True) -> list[str]:
    """The search terms of `text`, in order, repeats kept; stop words left out unless all are.

    Args:
        limit: stop after this many terms (a bound: the text is read no further than it needs).
        stop_words_only: a text of only stop words gives them (False: it gives none).
    """
    kept: list[str] = []
    stopped: list[str] = []
    stems = _STEMS
    for word in _ascii_words(text) if text.isascii() else _words(text):
        if word in STOP_WORDS:
            if stop_words_only and not kept and len(stopped) < (limit or 64):
                stopped.append(word)
            continue
        found = stems.get(word)
        kept.append(found if found is not None else word if word[0].isdigit() else _stem(word))
        if limit is not None and len(kept) >= limit:
            break
    return kept if kept else [_stem(w) for w in stopped]


# Where a sentence ends: `.?!;` before a space (not in `5.6` or `a.b`), the full-width marks of
# Chinese and Japanese (no space follows them), a line break.
_SENTENCE_END = re.compile(r"(?<=[.?!;])\s+|(?<=[\u3002\uff1f\uff01\uff1b])\s*|\n+")


def sentences(text: str) -> Iterator[str]:
    """`text` cut where a sentence ends (`.`, `?`, `!`, `;` before a space, and line breaks):
    a message that asks for several things usually asks for each in a sentence of its own.
    Lazily: a reader that has what it needs stops reading."""
    start = 0
    for end in _SENTENCE_END.finditer(text):
        piece = text[start : end.start()]
        if piece and not piece.isspace():
            yield piece
        start = end.end()
    piece = text[start:]
    if piece and not piece.isspace():
        yield piece


def _ascii_words(text: str) -> list[str]:
    return list(map(str.lower, _ASCII_PART.findall(text)))  # digits are their own lower case


def _words(text: str) -> Iterator[str]:
    """Lower-case words (not yet stemmed), digit runs, and pairs of unspaced characters."""
    for match in _RUN.finditer(text):
        run = match.group()
        if run.isascii():
            yield from _ascii_words(run)
            continue
        for part in _SCRIPT_PART.findall(run):
            yield from _script_terms(part)


# The stems of the words met (a word is stemmed once, not once per tool or query that holds it).
# Bounded, as queries are anyone's text: only words of at most `_STEMMED_CHARS` characters are
# kept (real words are shorter; a longer one costs a stem each time, which is cheap), and at
# most `_STEMMED_WORDS` of them (a catalog of 2,400 tools has ~5,000): past that, it starts again.
# At most ~4 MB whoever writes the queries.
_STEMS: dict[str, str] = {}
_STEMMED_CHARS = 32
_STEMMED_WORDS = 16_384


def _stem(word: str) -> str:
    found = _STEMS.get(word)
    if found is None:
        found = stem(word) if word.isascii() and word.isalpha() else word
        if len(word) <= _STEMMED_CHARS:
            if len(_STEMS) >= _STEMMED_WORDS:  # so many words are seen only under attack: start again
                _STEMS.clear()
            _STEMS[word] = found
    return found


def _script_terms(part: str) -> Iterator[str]:
    if part.isdigit():
        yield part if part.isascii() else unicodedata.normalize("NFKC", part)
        return
    # Accents and compatibility forms away: "Käärijä" is found by "kaarija", full-width letters by
    # their ASCII forms. (Not tried on the unspaced scripts, which never fold to ASCII: a
    # character at a time in Python over 8 KB of Chinese would cost milliseconds.)
    if _UNSPACED.search(part) is None:
        folded = "".join(c for c in unicodedata.normalize("NFKD", part) if not unicodedata.combining(c))
        if folded.isascii():
            yield from _ascii_words(folded)
            return
    folded = unicodedata.normalize("NFKC", part).casefold()  # marks kept: Thai vowels are marks
    if _UNSPACED.search(folded) is None:
        yield folded
        return
    # A run mixing unspaced script with others ("LG에어컨"): each kind of stretch on its own.
    start = 0
    for m in _UNSPACED_RUN.finditer(folded):
        if m.start() > start:
            yield folded[start : m.start()]
        chars = m.group()
        if len(chars) == 1:
            yield chars
        else:
            for i in range(len(chars) - 1):
                yield chars[i : i + 2]
        start = m.end()
    if start < len(folded):
        yield folded[start:]


_UNSPACED_RUN = re.compile(_UNSPACED.pattern + "+")

_VOWEL = re.compile(r"[aeiouy]")
# Inflections first, then one derivational suffix; each rule: (suffix, replacement).
_INFLECTIONS = (
    ("ings", ""),
    ("ing", ""),
    ("ies", "i"),
    ("ied", "i"),
    ("ed", ""),
    ("es", ""),
    ("s", ""),
    ("ly", ""),
)
_DERIVATIONS = (
    ("ational", ""), ("ization", ""), ("ations", ""), ("ation", ""), ("ators", ""), ("ator", ""),
    ("ate", ""), ("at", ""), ("ments", ""), ("ment", ""), ("ness", ""), ("er", ""), ("e", ""),
)  # fmt: skip
_KEEP_ENDINGS = ("ss", "us", "is")
_ES_AFTER = ("s", "x", "z", "ch", "sh")


def stem(word: str) -> str:
    """A light English stem of a lower-case word (`"calculated"` -> `"calcul"`).

    An inflection is cut (`-s`, `-es`, `-ed`, `-ing`, `-ly`; `-ies`, `-ied` -> `-i`), then,
    from a word still longer than four letters, one derivational ending (`-ation`, `-ator`,
    `-ate`, `-ment`, `-ness`, `-er`, `-e`...); a stem keeps three letters and a vowel, and a
    `-y` after a consonant ends it as `-i` (`movies`, `movie` -> `movi`; `copies`, `copy` ->
    `copi`). Both sides of a search go through it, so a stem needs only to be the same for
    the forms of a word, not a word itself.
    """
    if len(word) <= 3 or word.endswith(_KEEP_ENDINGS):
        return word
    for suffix, replacement in _INFLECTIONS:
        if word.endswith(suffix):
            base = word[: -len(suffix)]
            if suffix == "es" and not base.endswith(_ES_AFTER):
                base = word[:-1]
            elif suffix == "ly" and (len(base) < 4 or base[-1] in "pi"):
                break  # `apply`, `multiply`, `family` are no adverbs
            if len(base) >= 3 and _VOWEL.search(base):
                word = _undouble(base) + replacement if not replacement else base + replacement
            break
    if len(word) > 4:
        for suffix, replacement in _DERIVATIONS:
            if word.endswith(suffix):
                base = word[: -len(suffix)]
                if len(base) >= 3 and _VOWEL.search(base):
                    word = _undouble(base) + replacement
                break
    if word[-1] == "y" and len(word) > 3 and word[-2] not in "aeiou":
        return word[:-1] + "i"
    return word


def _undouble(base: str) -> str:
    """`runn` -> `run`, `stopp` -> `stop` (not `call`, `pass`, `buzz`)."""
    if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz" and base[-1] not in "aeiou":
        return base[:-1]
    return base
