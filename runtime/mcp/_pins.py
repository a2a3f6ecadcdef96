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
- new, and no unlisted pinned tool has its input schema or its name here: pinned (trust on
  first use);
- changed, or new under a name while a pinned tool with the same input schema, or called by the
  same name here, is gone (a rename), or pinned and listed with other tools that are called by
  its name here (a clash: when none of them is pinned, none is served or pinned): a
  `ToolChange` goes to the spec's `on_tool_change(change)` (sync or async). True
  accepts it (the new definition is pinned and served); anything else, or no callback (the
  default), refuses it: the change is logged (once), the tool stays listed as it was pinned
  (the model never reads the changed description), and its calls are answered REJECTED saying
  what changed, with a `tool_runtime.mcp.tool_held` event on the call's span. The callback is
  asked again at every listing, so a change accepted later (an operator's approval the callback
  looks up) is served from the next listing on.

Pins fail closed: they are read from the store itself (a `DegradingStore`'s primary, never
its memory fallback, which holds no pins), each step bounded by its step timeout. While the
store cannot be read, a tool is compared with the pin this process read or wrote, if any;
otherwise it is not served (`Pins.unchecked`; the catalog reviews the listing again until the
store answers), and nothing is pinned anew.

Off for a server whose spec says `pin=False`.
"""

from __future__ import annotations

import inspect
import json
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

import msgspec
import trio
from opentelemetry import trace

from ..exceptions import ToolRejected
from ..schema import ToolDescriptor
from ..stores import DegradingStore, StoreError
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


Listed = Mapping[str, Sequence[tuple[str, dict[str, Any]]]]
"""A listing by local name: each name the runtime serves -> the server's tools that become it
(their server names and definitions, in listing order; usually one)."""


class Pins:
    """One server's pins, read from and written to `store` at every listing (see the module).

    Attributes:
        unchecked: the local names the last review served nothing under because their pins could
            not be read (the store is down, and this process never read them): asked again at the
            next review (`RemoteCatalog.recheck`).
    """

    def __init__(
        self,
        store: Any,
        server: str,
        on_change: OnToolChange | None,
        local_name: Callable[[str], str | None] = lambda name: name,
    ) -> None:
        self._local_name = local_name  # a server's tool name -> the name it is served by here
        self._timeout = 1.0
        if isinstance(store, DegradingStore):
            # its memory fallback knows no pins: what it says while the store is down is not a pin
            self._timeout = store.step_timeout
            store = store.primary
        self._store = store
        self._server = server
        self._on_change = on_change
        self._prefix = f"{KEY}{urllib.parse.quote(server, safe='')}:"
        self._known: dict[str, dict[str, Any]] = {}  # pins this process has read or written
        self._told: set[tuple[str, str]] = set()  # (tool, its listed definition) logged as held
        self._clashes: set[tuple[str, ...]] = set()  # name clashes logged
        self._down: str | None = None  # why the store could not be read, while it cannot
        self._down_told = False  # the tools not served while it cannot were logged
        self.unchecked: set[str] = set()

    async def review(self, listed: Listed) -> dict[str, tuple[str, ToolChange | None]]:
        """Compare each listed definition with its pin; pin what is new, ask about what changed.

        Returns local name -> (the server's tool served under it, the change not accepted that
        holds it, or None). A local name left out is served by nothing: its tools clash and
        none is the pinned one (`_choose`), or its pin cannot be checked (`unchecked`).
        """
        try:
            pinned = await self._load()
        except _STORE_DOWN as exc:
            pinned = dict(self._known)  # the pins this process read or wrote still hold
            self._store_down(exc)
        else:
            if self._down is not None:
                log.warning("MCP server %r: the pin store answers again; its pins are checked", self._server)
                self._down, self._down_told = None, False
        everyone = {remote for group in listed.values() for remote, _ in group}
        gone = {name: d for name, d in pinned.items() if name not in everyone}
        served: dict[str, tuple[str, ToolChange | None]] = {}
        self.unchecked = set()
        for local, group in listed.items():
            clash: tuple[str, ...] = ()
            if len(group) == 1:
                name, definition = group[0]
            else:
                chosen = self._choose(local, group, pinned)
                if chosen is None:
                    if self._down is not None:
                        self.unchecked.add(local)
                    continue
                name, definition = chosen
                others = [n for n, _ in group if n != name]
                clash = (
                    f"{_names(others)} {'is' if len(others) == 1 else 'are'} also called {local!r} here "
                    "(leave one out with exclude=)",
                )
            try:
                verdict = await self._verdict(local, name, definition, pinned, gone, clash)
            except _STORE_DOWN as exc:
                self._store_down(exc)
                verdict = _UNCHECKED
            if verdict is _UNCHECKED:
                self.unchecked.add(local)
                continue
            served[local] = (name, verdict if isinstance(verdict, ToolChange) else None)
        if self.unchecked:
            log.log(
                logging.DEBUG if self._down_told else logging.WARNING,
                "MCP server %r: the pin store cannot be read (%s); tools %s are not served until "
                "their pins can be checked",
                self._server,
                self._down,
                ", ".join(sorted(self.unchecked)),
            )
            self._down_told = True
        return served

    async def _verdict(
        self,
        local: str,
        name: str,
        definition: dict[str, Any],
        pinned: Mapping[str, dict[str, Any]],
        gone: Mapping[str, dict[str, Any]],
        clash: tuple[str, ...] = (),
    ) -> ToolChange | object | None:
        """None: serve it as listed; a ToolChange: held by it; `_UNCHECKED`: its pin cannot be read.
        `clash`: other tools of the server take its name here (then it is pinned, and held)."""
        known = pinned.get(name)
        twin = None
        if known is None:
            # a pinned tool gone from the listing, whose name here it takes, or whose schema it has
            twin = next((n for n in gone if self._local_name(n) == local), None)
            twin = twin if twin is not None else _same_input(gone, definition)
            if twin is None:
                if self._down is not None:
                    return _UNCHECKED  # new, or pinned in a store that cannot say: never pinned anew here
                if await self._pin_first(name, definition):
                    return None
                known = self._known.get(name)  # another process pinned it first: compare with that
                if known is None:
                    return None
        if known == definition and not clash:
            return None
        before = known if known is not None else gone[twin or ""]
        change = ToolChange(
            server=self._server,
            tool=name,
            changes=clash + (describe_changes(before, definition) if before != definition else ()),
            pinned=before,
            listed=definition,
            renamed_from=twin,
        )
        if await self._accepts(change):
            try:
                if before != definition:
                    await self._set(name, definition)
            except _STORE_DOWN as exc:
                self._known[name] = definition  # accepted here; written when asked again
                self._store_down(exc)
            log.warning(
                "MCP server %r: tool %r changed (%s); the change was accepted and is served",
                self._server,
                name,
                change,
            )
            return None
        told = (name, _canonical({**definition, "clash": clash}))
        if told not in self._told:
            self._told.add(told)
            log.warning(
                "MCP server %r: tool %r changed since it was pinned (%s); it is not served until "
                "the change is accepted (the spec's on_tool_change=)",
                self._server,
                name,
                change,
            )
        return change

    def _choose(
        self, local: str, group: Sequence[tuple[str, dict[str, Any]]], pinned: Mapping[str, dict[str, Any]]
    ) -> tuple[str, dict[str, Any]] | None:
        """Of the server's tools that all become `local` here, the pinned one (the first pinned,
        if several are), which is then held while they clash; None when none is pinned: none is
        served, and none pinned (a new tool never takes a name by being listed first)."""
        names = tuple(name for name, _ in group)
        chosen = next(((name, d) for name, d in group if name in pinned), None)
        if chosen is None and names not in self._clashes and self._down is None:
            self._clashes.add(names)
            log.error(
                "MCP server %r: tools %s are all called %r here; none of them is served "
                "(leave all but one out with exclude=)",
                self._server,
                _names(names),
                local,
            )
        return chosen

    def _store_down(self, exc: BaseException) -> None:
        self._down = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    async def _ask(self, op: str, *args: Any) -> Any:
        """A step of the pin store, awaited at most its step timeout (then TimeoutError)."""
        with trio.fail_after(self._timeout):
            return await getattr(self._store, op)(*args)

    async def _load(self) -> dict[str, dict[str, Any]]:
        pins = dict(self._known)  # what this process knows stands if the store lost it (evicted)
        n = len(self._prefix)
        for key in await self._ask("keys", self._prefix):
            data = await self._ask("get", key)
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
        if await self._ask("add", key, _canonical(definition).encode()):
            self._known[name] = definition
            return True
        data = await self._ask("get", key)
        if data is not None:
            self._known[name] = json.loads(data)
        return False

    async def _set(self, name: str, definition: dict[str, Any]) -> None:
        await self._ask("set", self._prefix + name, _canonical(definition).encode())
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


_UNCHECKED = object()


def _names(names: Sequence[str]) -> str:
    return ", ".join(map(repr, names))


_STORE_DOWN = (StoreError, OSError, TimeoutError, trio.TooSlowError)


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
