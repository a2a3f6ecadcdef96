"""Wire types: what a tool call is, what comes back, and the metadata that rides along.

Every message is a frozen msgspec Struct in a tagged union (`type` field), so it crosses a
process boundary (a worker pipe, Ray, the CLI) as msgspec JSON or MessagePack bytes and
comes back equal. Inside one process they pass through channels as objects.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Final, Generic, Literal, TypeVar

import msgspec

__all__ = [
    "ECHO_LIMIT",
    "TERMINATE_TOOL",
    "AudioPart",
    "ContentPart",
    "FailureKind",
    "ImagePart",
    "ResourceLinkPart",
    "ResourcePart",
    "TextPart",
    "ToolCall",
    "ToolCallMetadata",
    "ToolFailure",
    "ToolPending",
    "ToolResult",
    "ToolSuccess",
    "decode_result",
    "describe_part",
    "echo",
    "encode_result",
]

TERMINATE_TOOL: Final = "__terminate__"
"""Reserved tool name an agent loop uses to finish with a final answer (Koog's TerminationTool)."""

ECHO_LIMIT: Final = 128
"""Characters of a name or id (sent by a model) that a failure text repeats back."""


def echo(value: object, limit: int = ECHO_LIMIT) -> str:
    """`value` as text fit to repeat in a failure message: at most `limit` characters.

    A model can send a megabyte "tool name"; the failure that answers it must not send the
    megabyte back (nor make a span, a log line or a model turn out of it).
    """
    text = value if isinstance(value, str) else type(value).__name__ if value is None else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text)} characters)"


class FailureKind(enum.StrEnum):
    """Why a call failed; the value is what providers and spans see (`error.type`)."""

    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    REJECTED = "rejected"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    UNAVAILABLE = "unavailable"
    OVERLOADED = "overloaded"


class ToolCall(msgspec.Struct, frozen=True, tag="call", tag_field="type"):
    """One tool call as the model asked for it.

    Attributes:
        id: the provider's call id; the result carries it back.
        name: the tool the model named (not checked until the call is routed).
        arguments: JSON text as the model wrote it (OpenAI), or an already-parsed
            object (Anthropic, Gemini). Decoded once, in the tool actor.
    """

    id: str
    name: str
    arguments: str | dict[str, Any] = "{}"


class TextPart(msgspec.Struct, frozen=True, kw_only=True, tag="text", tag_field="type"):
    """A piece of text in a multimodal result."""

    text: str


class ImagePart(msgspec.Struct, frozen=True, kw_only=True, tag="image", tag_field="type"):
    """An image in a multimodal result (bytes travel as base64 in JSON)."""

    data: bytes
    mime_type: str = "image/png"


class AudioPart(msgspec.Struct, frozen=True, kw_only=True, tag="audio", tag_field="type"):
    """Audio in a multimodal result (bytes travel as base64 in JSON)."""

    data: bytes
    mime_type: str = "audio/wav"


class ResourcePart(msgspec.Struct, frozen=True, kw_only=True, tag="resource", tag_field="type"):
    """An embedded resource: its URI and either its text or its bytes (`blob`).

    Attributes:
        uri: where the resource lives (`file:///...`, `test://...`).
        mime_type: its type, when known.
        text: its content, for a text resource.
        blob: its content, for a binary resource (base64 in JSON).
    """

    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: bytes | None = None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.blob is None):
            raise ValueError("a ResourcePart has exactly one of text and blob")


class ResourceLinkPart(msgspec.Struct, frozen=True, kw_only=True, tag="resource_link", tag_field="type"):
    """A link to a resource the model may ask for (not its content).

    Attributes:
        uri: the resource's URI.
        name: its name.
        mime_type: its type, when known.
        description: what it is, when said.
        size: its size in bytes, when known.

    A link to `artifact://art_...` is a result kept whole by the runtime (`Artifacts`): its
    handle is `name`, and the runtime's `read_artifact` tool or MCP `resources/read` reads it.
    """

    uri: str
    name: str
    mime_type: str | None = None
    description: str | None = None
    size: int | None = None


ContentPart = TextPart | ImagePart | AudioPart | ResourcePart | ResourceLinkPart


def describe_part(part: ContentPart) -> str:
    """One line of text standing for a part a provider cannot take as it is."""
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ImagePart):
        return f"[image ({part.mime_type}, {len(part.data)} bytes)]"
    if isinstance(part, AudioPart):
        return f"[audio ({part.mime_type}, {len(part.data)} bytes)]"
    if isinstance(part, ResourcePart):
        if part.text is not None:
            return part.text
        size = len(part.blob) if part.blob is not None else 0
        return f"[binary resource {part.uri} ({part.mime_type or 'unknown type'}, {size} bytes)]"
    about = f": {part.description}" if part.description else ""
    if part.uri.startswith("artifact://"):
        return f"[artifact {part.name} ({part.uri}){about}]"
    return f"[resource {part.name} ({part.uri}){about}]"


R = TypeVar("R")


class ToolSuccess(msgspec.Struct, Generic[R], frozen=True, kw_only=True, tag="success", tag_field="type"):
    """A call that returned; `ToolSuccess[int]` for a tool whose result is an int (what
    `Runtime.invoke(tool, ...)` returns for a tool object whose result type is known).

    Attributes:
        call_id: the id of the call this answers.
        tool: the tool's name.
        content: the text the model reads.
        value: the tool's typed result (decoded back to builtins after a process hop).
        parts: multimodal content; empty means one text part, `content`.
        type_mismatch: None, or why the value is not of the tool's declared result type (the
            model read it as it was returned; the tool's `strict_result=True` fails such calls).
    """

    call_id: str
    tool: str
    content: str
    value: R = None  # type: ignore[assignment]  # None for a tool that returns nothing
    parts: tuple[ContentPart, ...] = ()
    type_mismatch: str | None = None

    ok: ClassVar[bool] = True


class ToolFailure(msgspec.Struct, frozen=True, kw_only=True, tag="failure", tag_field="type"):
    """A call that did not return a value, for any reason; never raised, always returned.

    Attributes:
        call_id: the id of the call this answers.
        tool: the tool's name (as asked for, if it is unknown).
        kind: what went wrong, see `FailureKind`.
        message: what the model reads after "Error: "; never a traceback.
        error_type: the qualified exception type behind an ERROR (for logs and spans).
    """

    call_id: str
    tool: str
    kind: FailureKind
    message: str
    error_type: str | None = None

    ok: ClassVar[bool] = False

    @property
    def content(self) -> str:
        """The text the model reads; it starts with "Error:" so that every provider's model sees a failure."""
        return f"Error: {self.message}"


class ToolPending(msgspec.Struct, frozen=True, kw_only=True, tag="pending", tag_field="type"):
    """A call that ended its turn without a result yet: it waits for an approval, or its result
    comes from outside (a browser, a webhook). It is journaled as a detached call (`detached_id`)
    that the application approves, denies, expires or supplies the result of; the result then
    comes in a later turn. Neither a success nor a failure: it may yet succeed, so retries,
    breakers, caches and the failure counters never take it for either.

    Attributes:
        call_id: the id of the call this answers (the model's).
        tool: the tool's name.
        detached_id: the detached call it became (`rt.detached(detached_id, principal=...)`).
        reason: "approval" (it runs once approved) or "outside" (its result is supplied).
        message: what the model reads (not an error: it is told the result comes later).
        expires_at: when the pending call expires unless decided (seconds since the epoch).
    """

    call_id: str
    tool: str
    detached_id: str
    reason: Literal["approval", "outside"]
    message: str
    expires_at: float | None = None

    ok: ClassVar[bool] = False

    @property
    def content(self) -> str:
        """The text the model reads: that the call waits, and that its result comes later."""
        return self.message


ToolResult = ToolSuccess[Any] | ToolFailure | ToolPending


class ToolCallMetadata(Mapping[str, Any]):
    """Read-only side-band data for one call: trace context, tenant, request id.

    Never sent to the model and never part of a schema. `a | b` merges, right wins;
    `ToolCallMetadata.EMPTY` is the shared empty instance.
    """

    __slots__ = ("_data",)
    EMPTY: ClassVar[ToolCallMetadata]

    def __init__(self, data: Mapping[str, Any] | None = None, /, **items: Any) -> None:
        merged = dict(data) if data else {}
        if items:
            merged.update(items)
        self._data: dict[str, Any] = merged

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> ToolCallMetadata:
        """Return `data` as metadata without copying when it already is."""
        if data is None:
            return cls.EMPTY
        if isinstance(data, ToolCallMetadata):
            return data
        return cls(data)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __or__(self, other: Mapping[str, Any]) -> ToolCallMetadata:
        if not other:
            return self
        if not self._data:
            return ToolCallMetadata.of(other)
        return ToolCallMetadata({**self._data, **other})

    def __ror__(self, other: Mapping[str, Any]) -> ToolCallMetadata:
        return ToolCallMetadata.of(other) | self

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ToolCallMetadata):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to dicts, so unhashable like them

    def __repr__(self) -> str:
        return f"ToolCallMetadata({self._data!r})"

    def to_dict(self) -> dict[str, Any]:
        """A plain copy, for crossing a process boundary."""
        return dict(self._data)


ToolCallMetadata.EMPTY = ToolCallMetadata()

_result_encoder = msgspec.json.Encoder()
_result_decoder: msgspec.json.Decoder[ToolResult] = msgspec.json.Decoder(ToolResult)
_msgpack_encoder = msgspec.msgpack.Encoder()
_msgpack_decoder: msgspec.msgpack.Decoder[ToolResult] = msgspec.msgpack.Decoder(ToolResult)


def encode_result(result: ToolResult, *, format: Literal["json", "msgpack"] = "json") -> bytes:
    """Encode a result for a process boundary with the cached encoders."""
    if format == "msgpack":
        return _msgpack_encoder.encode(result)
    return _result_encoder.encode(result)


def decode_result(data: bytes, *, format: Literal["json", "msgpack"] = "json") -> ToolResult:
    """Decode a result encoded by `encode_result`."""
    if format == "msgpack":
        return _msgpack_decoder.decode(data)
    return _result_decoder.decode(data)
