"""The command line: demo, schema, call, serve."""

from ._main import console_main as console_main
from ._main import main as main

__all__ = [
    "console_main",
    "main",
]
