"""Argument parsing and the commands; every error is one clear line, never a traceback."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import trio

from .._version import __version__
from ..engine import Artifacts, open_runtime
from ..messages import ToolCall, ToolFailure
from ..registry import ToolRegistry
from ..schema import DIALECTS
from ..search import ToolSearch

__all__ = ["console_main", "load_registry", "main"]


class CommandError(Exception):
    """A mistake on the command line; printed as one line, exit status 2."""


def load_registry(spec: str, app_dir: str | None = None) -> ToolRegistry:
    """Import `MODULE:ATTR` and make a registry of it (a registry, a tool, a ToolSet, a list...).

    Args:
        spec: `MODULE:ATTR`.
        app_dir: the folder to import MODULE from (first on `sys.path`); None: the current one.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CommandError(f"expected MODULE:ATTR, got {spec!r}")
    if app_dir is not None:
        folder = os.path.abspath(app_dir)
        if not os.path.isdir(folder):
            raise CommandError(f"--app-dir {app_dir}: no such folder")
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        where = app_dir if app_dir is not None else os.getcwd()
        hint = "" if app_dir is not None else "; name the folder that holds it with --app-dir"
        raise CommandError(f"cannot import {module_name!r} (from {where}): {exc}{hint}") from exc
    except Exception as exc:  # the module itself failed while importing
        raise CommandError(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from exc
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
    registry = load_registry(args.target, args.app_dir)
    print(json.dumps(registry.schemas(args.provider, strict=args.strict), indent=2))
    return 0


def _call(args: argparse.Namespace) -> int:
    registry = load_registry(args.target, args.app_dir)

    async def call() -> ToolFailure | str:
        async with open_runtime(registry) as rt:
            result = await rt.call(ToolCall(id="cli", name=args.name, arguments=args.arguments))
        return result if isinstance(result, ToolFailure) else result.content

    outcome = trio.run(call)
    if isinstance(outcome, ToolFailure):
        print(outcome.content, file=sys.stderr)
        return 1
    print(outcome)
    return 0


def _serve(args: argparse.Namespace) -> int:
    registry = load_registry(args.target, args.app_dir)
    address = _address(args.http) if args.http is not None else None
    token = _token(args)
    if token is not None and address is None:
        raise CommandError("--token needs --http (stdio has no transport to authenticate)")
    from ..mcp import serve_http, serve_stdio  # the MCP SDK takes seconds to import: only when serving
    from ..mcp._server_http import check_http_options

    search = None
    if args.search_over is not None:
        if args.search_over < 0:
            raise CommandError(f"--search-over must be 0 or more, not {args.search_over}")
        search = ToolSearch(threshold=args.search_over, always=tuple(args.search_always))
    elif args.search_always:
        raise CommandError("--search-always needs --search-over N")

    if address is not None:
        try:
            check_http_options(address[0], token, None, args.insecure_no_auth)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    http_options = {
        "token": token,
        "allowed_hosts": tuple(args.allowed_host),
        "insecure_no_auth": args.insecure_no_auth,
        "read_timeout": args.read_timeout,
        "max_body": args.max_body,
        "max_body_buffer": args.max_body_buffer,
        "max_sessions": args.max_sessions,
        "max_sessions_per_principal": args.max_sessions_per_principal,
        "session_idle_timeout": args.session_idle_timeout,
        "sse_poll_after": args.sse_poll_after,
        "search": search,
    }

    # stdout is the stdio transport: everything else, logs included, goes to stderr.
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if args.token is not None:
        print(
            f"warning: --token is visible to every user of this machine (ps); use ${_TOKEN_ENV} or --token-file",
            file=sys.stderr,
        )

    artifacts: Artifacts | None = None
    if not args.no_artifacts:  # a result over the limit: its preview and a link the client reads
        artifacts = Artifacts(store=args.artifacts_dir, tools=False)

    async def serve() -> None:
        async with open_runtime(registry, artifacts=artifacts) as rt:
            if address is None:
                await serve_stdio(rt, search=search)
                return
            async with trio.open_nursery() as nursery:
                host, port = await nursery.start(
                    functools.partial(serve_http, rt, address[0], address[1], args.path, **http_options)
                )
                where = f"[{host}]" if ":" in host else host
                count = len(rt.registry)
                print(
                    f"serving {count} tool{'' if count == 1 else 's'} over MCP at http://{where}:{port}{args.path}",
                    file=sys.stderr,
                    flush=True,
                )

    try:
        trio.run(serve)
    except BaseException as exc:
        error = _only_error(exc)  # nurseries wrap what their tasks raise in ExceptionGroups
        if isinstance(error, KeyboardInterrupt):
            return 130
        if isinstance(error, OSError):
            where = f"on {args.http}" if args.http is not None else "over stdio"
            raise CommandError(f"cannot serve {where}: {error.strerror or error}") from exc
        if not isinstance(error, Exception):
            raise
        print(f"error: serving stopped: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


def _only_error(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member exception groups, else `exc` itself."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


_TOKEN_ENV = "TOOL_RUNTIME_MCP_TOKEN"


def _token(args: argparse.Namespace) -> str | None:
    """The bearer token: --token, else --token-file, else $TOOL_RUNTIME_MCP_TOKEN (else none)."""
    if args.token is not None and args.token_file is not None:
        raise CommandError("give --token or --token-file, not both")
    if args.token is not None:
        token: str = args.token
        return token
    if args.token_file is not None:
        try:
            with open(args.token_file, encoding="utf-8") as file:
                text = file.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read --token-file {args.token_file}: {exc}") from None
        token = text.rstrip("\r\n")  # the file's last newline is not part of the token
        if not token.strip():
            raise CommandError(f"--token-file {args.token_file} is empty: the MCP bearer token is empty")
        return token
    return os.environ.get(_TOKEN_ENV) or None


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise CommandError(f"expected --http HOST:PORT (e.g. 127.0.0.1:8000), got {text!r}")
    return host, int(port)


def _demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    return run_demo()


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="tool-runtime command line")
    parser.add_argument("--version", action="version", version=f"tool-runtime {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    # Where MODULE is imported from: the current folder unless --app-dir says (an MCP client such
    # as a desktop app starts `tool-runtime serve` in a folder of its own choosing).
    importing = argparse.ArgumentParser(add_help=False)
    importing.add_argument(
        "--app-dir",
        metavar="DIR",
        help="import MODULE from this folder (default: the current folder)",
    )
    demo = sub.add_parser("demo", help="run the offline demo")
    demo.set_defaults(run=_demo)
    schema = sub.add_parser("schema", help="print the tool schemas of MODULE:ATTR", parents=[importing])
    schema.add_argument("target", metavar="MODULE:ATTR")
    schema.add_argument("--provider", default="jsonschema", choices=sorted(DIALECTS))
    schema.add_argument("--strict", action="store_true", help="OpenAI strict mode")
    schema.set_defaults(run=_schema)
    call = sub.add_parser(
        "call", help="call one tool of MODULE:ATTR and print its result", parents=[importing]
    )
    call.add_argument("target", metavar="MODULE:ATTR")
    call.add_argument("name", metavar="NAME", help="the tool's name")
    call.add_argument(
        "arguments", metavar="JSON", nargs="?", default="{}", help="the arguments, a JSON object"
    )
    call.set_defaults(run=_call)
    serve = sub.add_parser(
        "serve", help="serve the tools of MODULE:ATTR over MCP (stdio unless --http)", parents=[importing]
    )
    serve.add_argument("target", metavar="MODULE:ATTR")
    serve.add_argument(
        "--http", metavar="HOST:PORT", help="serve streamable HTTP here (port 0: any free port)"
    )
    serve.add_argument("--path", default="/mcp", help="the HTTP endpoint's path (default /mcp)")
    serve.add_argument(
        "--token",
        help=f"require `Authorization: Bearer TOKEN` over HTTP (visible in ps: prefer ${_TOKEN_ENV} or --token-file)",
    )
    serve.add_argument(
        "--token-file", metavar="PATH", help="read the bearer token from this file (its last newline dropped)"
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host (and Origin) clients may use besides the bound host and loopback names; repeatable",
    )
    serve.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="allow a non-loopback --http bind without a token (anyone who reaches it can call every tool)",
    )
    serve.add_argument(
        "--read-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="close a connection that sends no request, or a request body, within this long (default 30)",
    )
    serve.add_argument(
        "--max-body",
        type=int,
        default=4 * 1024 * 1024,
        metavar="BYTES",
        help="largest request body (413 above)",
    )
    serve.add_argument(
        "--max-body-buffer",
        type=int,
        metavar="BYTES",
        help="most bytes of request bodies still arriving, all requests together (default 16 x --max-body)",
    )
    serve.add_argument(
        "--max-sessions", type=int, default=1000, help="most MCP sessions held at once (default 1000)"
    )
    serve.add_argument(
        "--max-sessions-per-principal",
        type=int,
        default=100,
        metavar="N",
        help="most sessions one principal holds (with --token or none: one client address); "
        "at a cap the least recently used idle session makes room (default 100)",
    )
    serve.add_argument(
        "--session-idle-timeout",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="close a session unused for this long (default 1800)",
    )
    serve.add_argument(
        "--sse-poll-after",
        type=float,
        metavar="SECONDS",
        help="a call running longer closes its SSE stream; the client polls for the result (SEP-1699)",
    )
    serve.add_argument(
        "--search-over",
        type=int,
        metavar="N",
        help="with more than N tools, list a search_tools tool (and the --search-always ones) "
        "instead of every tool; the tools a session's searches find join its listing",
    )
    serve.add_argument(
        "--search-always",
        action="append",
        default=[],
        metavar="NAME",
        help="a tool (or glob: 'git_*') listed whole even with --search-over; repeatable",
    )
    serve.add_argument(
        "--no-artifacts",
        action="store_true",
        help="cut results over the limit instead of keeping them whole as resources (artifact://...)",
    )
    serve.add_argument(
        "--artifacts-dir",
        metavar="PATH",
        help="keep results over the limit in files here (default: in memory)",
    )
    serve.set_defaults(run=_serve)
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m runtime") -> int:
    """Run the command line; returns the exit status.

    Args:
        argv: the arguments (default: `sys.argv[1:]`).
        prog: the command's name in the usage line and in errors.
    """
    args = _parser(prog).parse_args(argv)
    try:
        status: int = args.run(args)
        return status
    except CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def console_main() -> int:
    """The `tool-runtime` console script: `python -m runtime`, under its own name.

    `python -m runtime` puts the current folder first on `sys.path`; a console script puts
    its own `bin/` folder there instead. So that `tool-runtime serve my_tools:registry` finds
    `my_tools.py` where `python -m runtime serve my_tools:registry` does, the folder goes first.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    return main(prog="tool-runtime")
