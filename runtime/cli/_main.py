"""Argument parsing and the commands; every error is one clear line, never a traceback."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from ..registry import ToolRegistry
from ..schema import DIALECTS

__all__ = ["load_registry", "main"]


class CommandError(Exception):
    """A mistake on the command line; printed as one line, exit status 2."""


def load_registry(spec: str) -> ToolRegistry:
    """Import `MODULE:ATTR` and make a registry of it (a registry, a tool, a ToolSet, a list...)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CommandError(f"expected MODULE:ATTR, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandError(f"cannot import {module_name!r}: {exc}") from exc
    try:
        value: Any = module
        for part in attr.split("."):
            value = getattr(value, part)
    except AttributeError as exc:
        raise CommandError(f"{module_name!r} has no attribute {attr!r}") from exc
    if isinstance(value, ToolRegistry):
        return value
    try:
        return ToolRegistry(value if isinstance(value, list | tuple) else [value])
    except (TypeError, ValueError) as exc:
        raise CommandError(f"{spec} is not a registry or tools: {exc}") from exc


def _schema(args: argparse.Namespace) -> int:
    registry = load_registry(args.target)
    print(json.dumps(registry.schemas(args.provider, strict=args.strict), indent=2))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    return run_demo()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runtime", description="tool-runtime command line")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the offline demo")
    demo.set_defaults(run=_demo)
    schema = sub.add_parser("schema", help="print the tool schemas of MODULE:ATTR")
    schema.add_argument("target", metavar="MODULE:ATTR")
    schema.add_argument("--provider", default="jsonschema", choices=sorted(DIALECTS))
    schema.add_argument("--strict", action="store_true", help="OpenAI strict mode")
    schema.set_defaults(run=_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        status: int = args.run(args)
        return status
    except CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
