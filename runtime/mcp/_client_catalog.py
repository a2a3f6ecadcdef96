"""What one MCP server's tools become in the runtime: `RemoteCatalog`.

The connection (`RemoteServer`, in `_client`) hands each full listing here; the catalog makes
the runtime tools (`McpTool`, their `inputSchema` kept as given), keeps the listing within
its bounds (`max_tools`, `MAX_DESCRIPTION_CHARS`, `MAX_SCHEMA_BYTES`) and makes the
registry match it, changing only what changed. A name another tool already has is not
taken over: that tool is skipped and logged. Each listed tool is compared with its pin first
(`runtime.mcp._pins`): one whose change is not accepted is registered as a `HeldTool` (listed as
pinned, its calls REJECTED) instead of the changed definition. Tools of the server that are
called by one name here are all given to the pins, which say which one (if any) is served under
it; a tool whose pin cannot be read (the store is down) is not registered until `recheck` can.
"""

from __future__ import annotations

import fnmatch
import logging
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types as types
import msgspec

from ..schema import parse_json_schema
from ..stores import MemoryStore
from ._client_tasks import task_support
from ._client_tool import WRAP_MARKER, Caller, McpTool, local_name
from ._pins import HeldTool, Pins, ToolChange
from ._schema_tool import schema_descriptor, schema_validator

if TYPE_CHECKING:
    from ..engine import ToolRegistrar
    from ._client_transport import Transport

__all__ = ["MAX_DESCRIPTION_CHARS", "MAX_SCHEMA_BYTES", "RemoteCatalog", "ServerOptions"]

log = logging.getLogger("runtime.mcp")

MAX_DESCRIPTION_CHARS = 8192  # a tool description longer than this is cut (it goes to every prompt)
MAX_SCHEMA_BYTES = 200_000  # a tool whose input and output schemas are larger is skipped
_FINGERPRINT = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


class ServerOptions(Protocol):
    """What the connection and the catalog read of a spec (`ServerSpec` has it all)."""

    @property
    def name(self) -> str: ...
    @property
    def prefix(self) -> str | None: ...
    @property
    def mode(self) -> str: ...
    @property
    def connect_timeout(self) -> float: ...
    @property
    def call_timeout(self) -> float | None: ...
    @property
    def backoff(self) -> float: ...
    @property
    def max_backoff(self) -> float: ...
    @property
    def max_tools(self) -> int: ...
    @property
    def include(self) -> tuple[str, ...] | None: ...
    @property
    def exclude(self) -> tuple[str, ...]: ...
    @property
    def max_links(self) -> int: ...
    @property
    def max_link_bytes(self) -> int: ...
    def transport(self) -> Transport: ...


class RemoteCatalog:
    """The tools of one server as runtime tools, kept current in the registry.

    Attributes:
        tools: local name -> (the tool, its listing entry as last seen).
        held: local name -> the change that holds it (its tool is a `HeldTool`).
    """

    def __init__(self, spec: ServerOptions, caller: Caller) -> None:
        self.spec = spec
        self.name = spec.name
        self.tools: dict[str, tuple[McpTool | HeldTool, dict[str, Any]]] = {}
        self.held: dict[str, ToolChange] = {}
        self._caller = caller
        self._skipped: set[str] = set()  # names already logged as clashing
        self._pins: Pins | None = None
        self._listing: list[types.Tool] = []  # the last listing applied (`recheck`)

    async def _review(
        self, registrar: ToolRegistrar, listed: dict[str, list[tuple[types.Tool, dict[str, Any]]]]
    ) -> tuple[dict[str, tuple[types.Tool, dict[str, Any]]], dict[str, ToolChange]]:
        """Which listed tool is served under each local name, and the changes not accepted (those
        tools are held). With pinning off, the first of tools that clash is served, and none held."""
        if not getattr(self.spec, "pin", True):
            for name, group in listed.items():
                if len(group) > 1:
                    log.warning(
                        "MCP server %r: tools %s are all called %r here; the first is kept",
                        self.name,
                        ", ".join(repr(remote.name) for remote, _ in group),
                        name,
                    )
            return {name: group[0] for name, group in listed.items()}, {}
        pins = self._pins
        if pins is None:
            store = getattr(registrar, "store", None)
            pins = self._pins = Pins(
                store if store is not None else MemoryStore(),
                self.name,
                getattr(self.spec, "on_tool_change", None),
                lambda remote: local_name(remote, self.spec.prefix),
            )
        served = await pins.review(
            {name: [(remote.name, entry) for remote, entry in group] for name, group in listed.items()}
        )
        wanted: dict[str, tuple[types.Tool, dict[str, Any]]] = {}
        held: dict[str, ToolChange] = {}
        for name, (remote_name, change) in served.items():
            wanted[name] = next(c for c in listed[name] if c[0].name == remote_name)
            if change is not None:
                held[name] = change
        return wanted, held

    @property
    def unchecked(self) -> bool:
        """Whether some listed tools are not served because their pins could not be read (the
        store is down): `recheck` asks again."""
        return bool(self._pins is not None and self._pins.unchecked)

    async def recheck(self, registrar: ToolRegistrar) -> None:
        """Review the last listing again (its tools whose pins could not be read may be served now)."""
        await self.apply(registrar, self._listing)

    async def apply(self, registrar: ToolRegistrar, listing: list[types.Tool]) -> None:
        """Make the registered tools match `listing`: remove, replace and add only what changed."""
        self._listing = listing
        listed: dict[str, list[tuple[types.Tool, dict[str, Any]]]] = {}
        listing = self._bounded(listing)
        for remote in listing:
            name = local_name(remote.name, self.spec.prefix)
            if name is None:
                log.warning(
                    "MCP server %r: tool %r is skipped: no usable name is left", self.name, remote.name
                )
                continue
            entry = remote.model_dump(mode="json", by_alias=True, exclude_none=True)
            listed.setdefault(name, []).append((remote, {k: entry[k] for k in _FINGERPRINT if k in entry}))
        wanted, held = await self._review(registrar, listed)
        removed = [n for n in self.tools if n not in wanted]
        fresh: dict[str, tuple[McpTool | HeldTool, dict[str, Any]]] = {}
        for name, (remote, entry) in wanted.items():
            known = self.tools.get(name)
            change = held.get(name)
            if known is not None and known[1] == entry and self.held.get(name) == change:
                continue
            made: McpTool | HeldTool | None
            if change is not None:
                made = HeldTool(name=name, server=self.name, change=change)
            else:
                made = self._make(name, remote)
            if made is None:
                if known is not None:
                    removed.append(name)
                continue
            fresh[name] = (made, entry)
        self.held = held
        if removed:
            await registrar.unregister(*removed)
            for name in removed:
                del self.tools[name]
        replacing = [tool for name, (tool, _) in fresh.items() if name in self.tools]
        if replacing:
            await registrar.register(*replacing, replace=True)
            self.tools.update({n: fresh[n] for n in (t.name for t in replacing)})
        adding = [tool for name, (tool, _) in fresh.items() if name not in self.tools]
        if not adding:
            return
        try:
            await registrar.register(*adding)
        except ValueError:  # a name is taken by another tool: add the others one by one
            for tool in adding:
                try:
                    await registrar.register(tool)
                except ValueError as exc:
                    level = logging.DEBUG if tool.name in self._skipped else logging.WARNING
                    self._skipped.add(tool.name)
                    log.log(
                        level,
                        "MCP server %r: tool %r is skipped: %s (give the server a prefix=)",
                        self.name,
                        tool.name,
                        exc,
                    )
                else:
                    self.tools[tool.name] = fresh[tool.name]
        else:
            self.tools.update({t.name: fresh[t.name] for t in adding})

    def _bounded(self, listing: list[types.Tool]) -> list[types.Tool]:
        """The listing within the bounds: the tools `include`/`exclude` leave, at most `max_tools`
        of them, descriptions cut, no huge schema."""
        include, exclude = self.spec.include, self.spec.exclude
        if include is not None or exclude:
            listing = [t for t in listing if _chosen(t.name, include, exclude)]
        limit = self.spec.max_tools
        if len(listing) > limit:
            log.warning(
                "MCP server %r lists %d tools; the first %d are kept (max_tools=%d)",
                self.name,
                len(listing),
                limit,
                limit,
            )
            listing = listing[:limit]
        kept: list[types.Tool] = []
        for remote in listing:
            size = len(msgspec.json.encode(remote.input_schema)) + (
                len(msgspec.json.encode(remote.output_schema)) if remote.output_schema is not None else 0
            )
            if size > MAX_SCHEMA_BYTES:
                log.warning(
                    "MCP server %r: tool %r is skipped: its schemas are %d bytes (the limit is %d)",
                    self.name,
                    remote.name,
                    size,
                    MAX_SCHEMA_BYTES,
                )
                continue
            description = remote.description
            if description is not None and len(description) > MAX_DESCRIPTION_CHARS:
                log.warning(
                    "MCP server %r: the description of tool %r is cut to %d characters (it has %d)",
                    self.name,
                    remote.name,
                    MAX_DESCRIPTION_CHARS,
                    len(description),
                )
                remote = remote.model_copy(update={"description": description[:MAX_DESCRIPTION_CHARS]})
            kept.append(remote)
        return kept

    def _make(self, name: str, remote: types.Tool) -> McpTool | None:
        """The runtime tool for a listed tool, or None (logged) when its schema cannot be used."""
        prefix = self.spec.prefix
        if name != (f"{prefix}_{remote.name}" if prefix else remote.name):
            log.info("MCP server %r: tool %r is called %r here", self.name, remote.name, name)
        annotations = remote.annotations
        schema = dict(remote.input_schema)
        try:
            validator = schema_validator(schema)
            descriptor = schema_descriptor(
                name,
                remote.description or "",
                schema,
                title=remote.title or (annotations.title if annotations is not None else None),
                annotations=annotations.model_dump(by_alias=True, exclude_none=True) if annotations else None,
            )
        except Exception as exc:
            log.warning(
                "MCP server %r: tool %r is skipped: its inputSchema cannot be used (%s)",
                self.name,
                remote.name,
                exc,
            )
            return None
        wrapped = False
        if remote.output_schema is not None:
            descriptor = self._with_output(descriptor, remote)
            wrapped = bool(remote.output_schema.get(WRAP_MARKER))
        return McpTool(
            name=name,
            remote_name=remote.name,
            server=self.name,
            descriptor=descriptor,
            json_schema=schema,
            validator=validator,
            caller=self._caller,
            timeout=self.spec.call_timeout,
            wrapped=wrapped,
            requires_approval=getattr(self.spec, "requires_approval", False),
            idempotent=bool(annotations is not None and annotations.idempotent_hint),
            read_only=bool(annotations is not None and annotations.read_only_hint),
            remote_task=task_support(remote),
            options=getattr(self.spec, "options", None),
        )

    def _with_output(self, descriptor: Any, remote: types.Tool) -> Any:
        """The descriptor with the tool's outputSchema as its `output` type, when it parses."""
        try:
            output, definitions = parse_json_schema(remote.output_schema)
        except Exception as exc:
            log.debug("MCP server %r: the outputSchema of %r has no IR (%s)", self.name, remote.name, exc)
            return msgspec.structs.replace(descriptor, output_schema=dict(remote.output_schema or {}))
        if set(definitions) & set(descriptor.definitions):
            log.debug(
                "MCP server %r: the outputSchema of %r has no IR (its $defs clash)", self.name, remote.name
            )
            return msgspec.structs.replace(descriptor, output_schema=dict(remote.output_schema or {}))
        return msgspec.structs.replace(
            descriptor,
            output=output,
            definitions={**descriptor.definitions, **definitions},
            output_schema=dict(remote.output_schema or {}),  # served again as the server gave it
        )


def _chosen(name: str, include: tuple[str, ...] | None, exclude: tuple[str, ...]) -> bool:
    if include is not None and not any(fnmatch.fnmatchcase(name, p) for p in include):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in exclude)
