"""The command line: demo, schema, call, serve."""

from ._main import main as main
