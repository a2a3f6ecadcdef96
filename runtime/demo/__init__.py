"""The offline demo behind `make demo`."""

from ._run import run_demo as run_demo
from ._tree import span_tree as span_tree

__all__ = [
    "run_demo",
    "span_tree",
]
