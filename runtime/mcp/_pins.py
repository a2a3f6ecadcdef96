"""MCP tool pinning: a server's tool is served as it was when first seen, until a change is accepted.

An MCP server can change a tool after a user approved it: its description (what the model
reads and obeys), its parameters, its annotations (`readOnlyHint` lets a cache serve it,
`idempotentHint` lets retries run it twice), or the name it goes by ("rug pull", OWASP's MCP
Top 10). So the client pins each tool the first time it is seen: its name, title, description,
input and output schema and annotations, keyed by server, in the runtime's store
(`open_runtime(store=...)`: a `SQLiteStore` keeps pins across restarts, a `RedisStore` shares
them between server processes). At every listing (connect, reconnect, `tools/list_changed`)
each listed tool is compared with its pin:

- unchanged: served as always (nothing happens per call: pins are read at listings only);
- new, and no unlisted pinned tool has its input schema: pinned (trust on first use);
- changed, or new under a name while a pinned tool with the same input schema is gone (a
  rename): a `ToolChange` goes to the spec's `on_tool_change(change)` (sync or async). True
  accepts it (the new definition is pinned and served); anything else, or no callback (the
  default), refuses it: the change is logged (once), the tool stays listed as it was pinned
  (the model never reads the changed description), and its calls are answered REJECTED saying
  what changed, with a `tool_runtime.mcp.tool_held` event on the call's span. The callback is
  asked again at every listing, so a change accepted later (an operator's approval the callback
  looks up) is served from the next listing on.

Off for a server whose spec says `pin=False`.
"""

from __future__ import annotations

import inspect
import json
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

import msgspec
from opentelemetry import trace

from ..exceptions import ToolRejected
from ..schema import ToolDescriptor
from ..tools import CallContext, ToolBase
from ._schema_tool import schema_descriptor

__all__ = ["HeldTool", "Pins", "ToolChange", "describe_changes"]

log = logging.getLogger("runtime.mcp")

KEY = "mcp-pin:"
"""Store keys: `mcp-pin:{server, percent-encoded}:{the server's tool name}`."""
EVENT = "tool_runtime.mcp.tool_held"
"""The span event of a call answered REJECTED because its tool's change was not accepted."""


class ToolChange(msgspec.Struct, frozen=True, kw_only=True):
    """A tool whose listed definition differs from its pin: what `on_tool_change` decides on.

    Attributes:
        server: the MCP server's name (its spec's `name`).
        tool: the name the server lists it by now.
        changes: what changed, in words ("description changed", "parameter 'limit' added",
            "annotation readOnlyHint: false -> true", "renamed from 'search'"...).
        pinned: the definition as it was pinned (name, title, description, inputSchema,
            outputSchema, annotations: MCP's own keys).
        listed: the definition the server lists now.
        renamed_from: the pinned tool this one seems to be under a new name (the same input
            schema), when it is new by name.
    """

    server: str
    tool: str
    changes: tuple[str, ...]
    pinned: dict[str, Any]
    listed: dict[str, Any]
    renamed_from: str | None = None

    def __str__(self) -> str:
        return "; ".join(self.changes)


OnToolChange = Callable[[ToolChange], "bool | Awaitable[bool]"]


class Pins:
    """One server's pins, read from and written to `store` at every listing (see the module)."""

    def __init__(self, store: Any, server: str, on_change: OnToolChange | None) -> None:
        self._store = store
        self._server = server
        self._on_change = on_change
        self._prefix = f"{KEY}{urllib.parse.quote(server, safe='')}:"
        self._known: dict[str, dict[str, Any]] = {}  # pins this process has read or written
        self._told: set[tuple[str, str]] = set()  # (tool, its listed definition) logged as held

    async def review(self, listed: Mapping[str, dict[str, Any]]) -> dict[str, ToolChange]:
        """Compare each listed definition (by the server's tool name) with its pin; pin what is new,
        ask about what changed. Returns the changes not accepted (those tools are held)."""
        pinned = await self._load()
        gone = {name: d for name, d in pinned.items() if name not in listed}
        held: dict[str, ToolChange] = {}
        for name, definition in listed.items():
            known = pinned.get(name)
            twin = None
            if known is None:
                twin = _same_input(gone, definition)
                if twin is None:
                    if await self._pin_first(name, definition):
                        continue
                    known = self._known.get(name)  # another process pinned it first: compare with that
                    if known is None:
                        continue
            if known == definition:
                continue
            before = known if known is not None else gone[twin or ""]
            change = ToolChange(
                server=self._server,
                tool=name,
                changes=describe_changes(before, definition),
                pinned=before,
                listed=definition,
                renamed_from=twin,
            )
            if await self._accepts(change):
                await self._set(name, definition)
                log.warning(
                    "MCP server %r: tool %r changed (%s); the change was accepted and is served",
                    self._server,
                    name,
                    change,
                )
                continue
            held[name] = change
            told = (name, _canonical(definition))
            if told not in self._told:
                self._told.add(told)
                log.warning(
                    "MCP server %r: tool %r changed since it was pinned (%s); it is not served until "
                    "the change is accepted (the spec's on_tool_change=)",
                    self._server,
                    name,
                    change,
                )
        return held

    async def _load(self) -> dict[str, dict[str, Any]]:
        pins = dict(self._known)  # what this process knows stands if the store lost it (evicted, down)
        n = len(self._prefix)
        for key in await self._store.keys(self._prefix):
            data = await self._store.get(key)
            if data is None:
                continue
            try:
                pins[key[n:]] = json.loads(data)
            except ValueError:
                log.warning("MCP server %r: the pin %r in the store is not JSON; ignored", self._server, key)
        self._known = dict(pins)
        return pins

    async def _pin_first(self, name: str, definition: dict[str, Any]) -> bool:
        """Pin a definition seen for the first time; False when another process pinned one first
        (then `_known` holds that one)."""
        key = self._prefix + name
        if await self._store.add(key, _canonical(definition).encode()):
            self._known[name] = definition
            return True
        data = await self._store.get(key)
        if data is not None:
            self._known[name] = json.loads(data)
        return False

    async def _set(self, name: str, definition: dict[str, Any]) -> None:
        await self._store.set(self._prefix + name, _canonical(definition).encode())
        self._known[name] = definition

    async def _accepts(self, change: ToolChange) -> bool:
        decide = self._on_change
        if decide is None:
            return False
        try:
            answer = decide(change)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception:
            log.exception(
                "MCP server %r: on_tool_change failed for tool %r; the change is not accepted",
                self._server,
                change.tool,
            )
            return False
        return answer is True


class HeldTool(ToolBase[Any, Any], dynamic=True):
    """A tool of an MCP server whose definition changed and was not accepted: listed as it was
    pinned, every call answered REJECTED with what changed (the server is never called)."""

    tool_type: ClassVar[str] = "extension"
    takes_context: ClassVar[bool] = True
    checks_result: ClassVar[bool] = False

    def __init__(self, *, name: str, server: str, change: ToolChange) -> None:
        self.name = name
        self.server = server
        self.remote_name = change.tool
        self.change = change
        self.descriptor = _pinned_descriptor(name, change.pinned)
        self.description = self.descriptor.description
        self.args_type = dict[str, Any]
        what = f"tool {change.tool!r} of MCP server {server!r}"
        if change.renamed_from is not None:
            what = f"{what} (the pinned tool {change.renamed_from!r} under a new name)"
        self.message = (
            f"{what} changed since it was approved ({change}); it is not served until the change is accepted"
        )

    def decode_args(self, raw: str | bytes | Mapping[str, Any]) -> Any:
        return {}  # whatever the arguments, the answer is the same

    async def execute(self, args: Any, ctx: CallContext) -> Any:
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(
                EVENT,
                {
                    "tool_runtime.mcp.server": self.server,
                    "tool_runtime.mcp.tool": self.remote_name,
                    "tool_runtime.mcp.changes": list(self.change.changes),
                },
            )
        raise ToolRejected(self.message)

    def __repr__(self) -> str:
        return f"<HeldTool {self.name!r} of {self.server!r}>"


def describe_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, ...]:
    """What differs between two MCP tool definitions, in words (see `ToolChange.changes`)."""
    said: list[str] = []
    if before.get("name") != after.get("name"):
        said.append(f"renamed from {before.get('name')!r}")
    for key in ("title", "description"):
        if before.get(key) != after.get(key):
            said.append(f"{key} changed")
    said.extend(_schema_changes(before.get("inputSchema") or {}, after.get("inputSchema") or {}))
    if before.get("outputSchema") != after.get("outputSchema"):
        said.append("outputSchema changed")
    hints_before = before.get("annotations") or {}
    hints_after = after.get("annotations") or {}
    for hint in sorted(set(hints_before) | set(hints_after)):
        if hints_before.get(hint) != hints_after.get(hint):
            said.append(f"annotation {hint}: {_shown(hints_before, hint)} -> {_shown(hints_after, hint)}")
    return tuple(said) or ("definition changed",)


def _schema_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    if before == after:
        return []
    said: list[str] = []
    props_before = _properties(before)
    props_after = _properties(after)
    for name in props_after:
        if name not in props_before:
            said.append(f"parameter {name!r} added")
    for name in props_before:
        if name not in props_after:
            said.append(f"parameter {name!r} removed")
    for name in props_before:
        if name not in props_after:
            continue
        old, new = props_before[name], props_after[name]
        if old == new:
            continue
        if not isinstance(old, dict) or not isinstance(new, dict):
            said.append(f"parameter {name!r} changed")
            continue
        told = False
        if _type_of(old) != _type_of(new):
            said.append(f"parameter {name!r} retyped ({_type_of(old)} -> {_type_of(new)})")
            told = True
        if old.get("default") != new.get("default"):
            said.append(f"default of {name!r} changed ({_value(old, 'default')} -> {_value(new, 'default')})")
            told = True
        rest_old = {k: v for k, v in old.items() if k not in _TYPE_KEYS}
        rest_new = {k: v for k, v in new.items() if k not in _TYPE_KEYS}
        if rest_old != rest_new or not told:
            said.append(f"parameter {name!r} changed")
    required_before = set(before.get("required") or ())
    required_after = set(after.get("required") or ())
    for name in sorted(required_after - required_before):
        if name in props_before:
            said.append(f"parameter {name!r} now required")
    for name in sorted(required_before - required_after):
        if name in props_after:
            said.append(f"parameter {name!r} no longer required")
    rest_before = {k: v for k, v in before.items() if k not in ("properties", "required")}
    rest_after = {k: v for k, v in after.items() if k not in ("properties", "required")}
    if rest_before != rest_after or not said:
        said.append("inputSchema changed")
    return said


def _properties(schema: Mapping[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties")
    return properties if isinstance(properties, dict) else {}


_TYPE_KEYS = ("type", "anyOf", "oneOf", "$ref", "enum", "const", "items", "default")


def _type_of(schema: Mapping[str, Any]) -> str:
    for key in ("type", "$ref", "enum", "const", "anyOf", "oneOf"):
        if key in schema:
            value = schema[key]
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True)[:80]
    return "any"


def _value(schema: Mapping[str, Any], key: str) -> str:
    return json.dumps(schema[key])[:80] if key in schema else "none"


def _shown(hints: Mapping[str, Any], hint: str) -> str:
    return json.dumps(hints[hint]) if hint in hints else "unset"


def _same_input(pins: Mapping[str, dict[str, Any]], definition: Mapping[str, Any]) -> str | None:
    """The name of a pinned tool (no longer listed) whose input schema is this definition's."""
    schema = definition.get("inputSchema")
    for name, pinned in pins.items():
        if pinned.get("inputSchema") == schema:
            return name
    return None


def _canonical(definition: Mapping[str, Any]) -> str:
    return json.dumps(definition, sort_keys=True, separators=(",", ":"))


def _pinned_descriptor(name: str, pinned: Mapping[str, Any]) -> ToolDescriptor:
    """What the model is shown of a held tool: its definition as it was pinned."""
    description = str(pinned.get("description") or "")
    annotations = pinned.get("annotations")
    try:
        return schema_descriptor(
            name,
            description,
            pinned.get("inputSchema") or {"type": "object"},
            title=pinned.get("title"),
            annotations=dict(annotations) if isinstance(annotations, dict) else None,
        )
    except Exception:
        return ToolDescriptor(name=name, description=description)
