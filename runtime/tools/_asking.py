"""What a tool may ask during its call: the user (elicitation), the caller's model (sampling),
the caller's workspace roots; and who answers.

A tool asks through its `CallContext` (`ctx.elicit`, `ctx.sample`, `ctx.list_roots`). The
question goes to a handler: the ones of the enclosing `asking(...)` block (the MCP server sets
one per request, so a served tool asks the MCP client), else the ones given to
`open_runtime(on_elicit=..., on_sample=..., on_roots=...)`. With no handler the tool gets
`CannotAsk` (a `ToolUnavailable`), so an uncaught question becomes an UNAVAILABLE failure whose
text says what was asked and why no one could answer; never a hang.

Handlers deal in plain JSON values, the same whether the question comes from a local tool or
from an MCP server our client is connected to:

```python
async def on_elicit(q: Elicitation) -> Answer:
    print(q.message, q.schema)
    return Answer.accept({"confirm": True})    # or Answer.decline("not today") / Answer.cancel()
```
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Final, Generic, Literal, TypeVar

import msgspec

from ..exceptions import CannotAsk
from ..messages import AudioPart, ImagePart, TextPart

__all__ = [
    "Answer",
    "Asker",
    "CannotAsk",
    "ElicitHandler",
    "Elicitation",
    "Elicited",
    "Root",
    "RootsHandler",
    "RootsRequest",
    "SampleHandler",
    "Sampled",
    "Sampling",
    "SamplingMessage",
    "asking",
    "elicitation_schema",
    "current_asker",
]

T = TypeVar("T")
Action = Literal["accept", "decline", "cancel"]


class Elicitation(msgspec.Struct, frozen=True, kw_only=True):
    """A question for the user (MCP `elicitation/create`, form mode).

    Attributes:
        message: what to show the user.
        schema: the answer's JSON Schema: a flat object of primitive properties (MCP's
            requestedSchema); `{"type": "object", "properties": {}}` for a plain yes/no.
        tool_name: the tool that asks: a local tool, or for a question an MCP server asked,
            the runtime's tool whose call the server was serving (None when it cannot be told).
        call_id: the call that asks, or whose MCP request the server was serving (None when unknown).
        approval: True when the runtime asks before a `requires_approval` tool runs.
        arguments: the arguments of that call (approval only; JSON text as the model wrote it).
        key: the name the tool gave the question (MCP 2026-07-28 input requests are keyed by it).
        server: the MCP server that asked (the name of its `mcp.stdio` / `mcp.http` spec); None
            for a local tool's question.
    """

    message: str
    schema: dict[str, Any]
    tool_name: str | None = None
    call_id: str | None = None
    approval: bool = False
    arguments: str | None = None
    key: str | None = None
    server: str | None = None


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """An elicitation handler's answer: accept (with content), decline or cancel.

    Attributes:
        action: "accept", "decline" (the user said no) or "cancel" (the user dismissed it).
        content: the accepted values, as JSON values keyed by the schema's property names.
        reason: why it was declined or cancelled (local handlers; shown to the model on an
            approval that is denied).
    """

    action: Action
    content: dict[str, Any] | None = None
    reason: str | None = None

    @classmethod
    def accept(cls, content: Mapping[str, Any] | None = None) -> Answer:
        return cls(action="accept", content=dict(content) if content is not None else {})

    @classmethod
    def decline(cls, reason: str | None = None) -> Answer:
        return cls(action="decline", reason=reason)

    @classmethod
    def cancel(cls, reason: str | None = None) -> Answer:
        return cls(action="cancel", reason=reason)


class Elicited(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """What `await ctx.elicit(message, T)` returns.

    Attributes:
        action: "accept", "decline" or "cancel".
        value: the answer decoded into T (None unless accepted).
        reason: why it was declined or cancelled, when the answerer said.
    """

    action: Action
    value: T | None = None
    reason: str | None = None

    @property
    def accepted(self) -> bool:
        return self.action == "accept"


class SamplingMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a sampling conversation."""

    role: Literal["user", "assistant"]
    content: str | TextPart | ImagePart | AudioPart

    @property
    def text(self) -> str:
        content = self.content
        if isinstance(content, str):
            return content
        return content.text if isinstance(content, TextPart) else ""


class Sampling(msgspec.Struct, frozen=True, kw_only=True):
    """A request for a completion from the caller's model (MCP `sampling/createMessage`)."""

    messages: tuple[SamplingMessage, ...]
    max_tokens: int
    system_prompt: str | None = None
    temperature: float | None = None
    stop_sequences: tuple[str, ...] = ()
    model_hints: tuple[str, ...] = ()
    include_context: Literal["none", "thisServer", "allServers"] | None = None
    metadata: dict[str, Any] | None = None
    tool_name: str | None = None
    call_id: str | None = None
    key: str | None = None
    server: str | None = None
    """The MCP server that asked, as for `Elicitation.server`; `tool_name` and `call_id` likewise."""


class Sampled(msgspec.Struct, frozen=True, kw_only=True):
    """A sampling handler's answer: the model's reply."""

    text: str
    model: str = "unknown"
    stop_reason: str | None = "endTurn"
    role: Literal["user", "assistant"] = "assistant"


class Root(msgspec.Struct, frozen=True, kw_only=True):
    """A root the caller offers (a workspace folder): a `file://` URI and an optional name."""

    uri: str
    name: str | None = None


class RootsRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Who asks for the roots (as for `Elicitation`: the tool, the call, the MCP server)."""

    tool_name: str | None = None
    call_id: str | None = None
    key: str | None = None
    server: str | None = None


ElicitHandler = Callable[[Elicitation], Awaitable[Answer]]
"""`async def on_elicit(question: Elicitation) -> Answer`."""
SampleHandler = Callable[[Sampling], Awaitable[Sampled]]
"""`async def on_sample(request: Sampling) -> Sampled`."""
RootsHandler = Callable[[RootsRequest], Awaitable[Sequence[Root]]]
"""`async def on_roots(request: RootsRequest) -> list[Root]`."""


class Asker(msgspec.Struct, frozen=True):
    """Who answers each kind of question (None: no one), and why no one does (`missing`)."""

    on_elicit: ElicitHandler | None = None
    on_sample: SampleHandler | None = None
    on_roots: RootsHandler | None = None

    def over(self, fallback: Asker | None) -> Asker:
        """These handlers, with `fallback`'s where this one has none."""
        if fallback is None:
            return self
        return Asker(
            self.on_elicit or fallback.on_elicit,
            self.on_sample or fallback.on_sample,
            self.on_roots or fallback.on_roots,
        )

    @property
    def empty(self) -> bool:
        return self.on_elicit is None and self.on_sample is None and self.on_roots is None


_asker: contextvars.ContextVar[Asker | None] = contextvars.ContextVar("runtime_asker", default=None)


def current_asker() -> Asker | None:
    """The handlers of the enclosing `asking(...)` block (None outside one)."""
    return _asker.get()


@contextlib.contextmanager
def asking(
    *,
    on_elicit: ElicitHandler | None = None,
    on_sample: SampleHandler | None = None,
    on_roots: RootsHandler | None = None,
) -> Iterator[None]:
    """Calls started in this block send their tools' questions to these handlers (before the
    runtime's own; an outer block's handlers answer what these do not).

    ```python
    with runtime.asking(on_elicit=ask_the_user):
        result = await rt.call(call)
    ```
    """
    mine = Asker(on_elicit, on_sample, on_roots).over(_asker.get())
    token = _asker.set(mine)
    try:
        yield
    finally:
        _asker.reset(token)


# -- the answer's schema, from a Python type -------------------------------------------

_PRIMITIVE: Final = {"string", "number", "integer", "boolean"}
_STRING_KEYS: Final = ("title", "description", "minLength", "maxLength", "format", "default")
_NUMBER_KEYS: Final = ("title", "description", "minimum", "maximum", "default")


def elicitation_schema(answer_type: Any) -> dict[str, Any]:
    """The MCP `requestedSchema` for answers of `answer_type` (a Struct, dataclass or
    TypedDict of primitive fields: str, int, float, bool, enums / Literals of strings, lists
    of those enums, dates). Field defaults become `default` (SEP-1034).

    Raises:
        TypeError: the type cannot be asked for as a flat form.
    """
    if answer_type is None:
        return {"type": "object", "properties": {}}
    try:
        full = msgspec.json.schema(answer_type)
    except TypeError as exc:
        raise TypeError(f"cannot elicit a {answer_type!r}: {exc}") from None
    defs = full.get("$defs", {})
    top = _deref(full, defs)
    if top.get("type") != "object" or "properties" not in top:
        raise TypeError(
            f"cannot elicit a {answer_type!r}: the answer must be an object type "
            "(a msgspec Struct, dataclass or TypedDict of primitive fields)"
        )
    properties: dict[str, Any] = {}
    for name, prop in top["properties"].items():
        properties[name] = _flat(answer_type, name, prop, defs)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    required = [n for n in top.get("required", ()) if n in properties]
    if required:
        schema["required"] = required
    return schema


def _deref(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return schema
    target = {k: v for k, v in defs[ref.rsplit("/", 1)[-1]].items() if k != "title"}  # a class name
    return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}


def _flat(answer_type: Any, name: str, prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    prop = _deref(prop, defs)
    extra = {k: prop[k] for k in ("description", "default", "title") if k in prop}
    options = prop.get("anyOf")
    if isinstance(options, list):  # `T | None`: optional in a form, so just T
        kept = [_deref(o, defs) for o in options if o.get("type") != "null"]
        if len(kept) != 1:
            raise TypeError(f"cannot elicit {answer_type!r}: field {name!r} is a union")
        prop = {**kept[0], **{k: v for k, v in extra.items() if k != "default" or v is not None}}
    if "enum" in prop:
        values = prop["enum"]
        if not all(isinstance(v, str) for v in values):
            raise TypeError(f"cannot elicit {answer_type!r}: field {name!r} must be an enum of strings")
        out: dict[str, Any] = {"type": "string", "enum": list(values)}
        out.update({k: prop[k] for k in ("title", "description", "default") if k in prop})
        return out
    kind = prop.get("type")
    if kind == "array":
        items = _deref(prop.get("items", {}), defs)
        if "enum" not in items:
            raise TypeError(
                f"cannot elicit {answer_type!r}: field {name!r}: a list must be of an enum of strings"
            )
        out = {"type": "array", "items": {"type": "string", "enum": list(items["enum"])}}
        out.update(
            {k: prop[k] for k in ("title", "description", "default", "minItems", "maxItems") if k in prop}
        )
        return out
    if kind not in _PRIMITIVE:
        raise TypeError(
            f"cannot elicit {answer_type!r}: field {name!r} is not a string, number, integer, "
            "boolean, enum or list of enum values (MCP forms are flat)"
        )
    keys = (
        _STRING_KEYS
        if kind == "string"
        else _NUMBER_KEYS
        if kind in ("number", "integer")
        else (
            "title",
            "description",
            "default",
        )
    )
    out = {"type": kind}
    out.update({k: prop[k] for k in keys if k in prop})
    return out
