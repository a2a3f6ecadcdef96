"""The journal of detached and deferred calls: one record per call in the runtime's store.

A record is the whole of what outlives the process that made it: the call (its tool, the
model's call id, its arguments, its JSON-able metadata), who it runs for, where it is (its
phase), who runs it (its owner, while it runs), whether its tool's code may have started (its
side effects), where that work can be picked up again (its checkpoint: a started call with one
is resumed by recovery, idempotent or not), what it waits for (an approval, an outside result,
the answer to a question), and its result once done. Each change is one compare-and-set
(`Store.swap`) of the whole record: of two processes that change it at once one wins, the other
reads it again and decides anew (a second approval sees it approved; a cancel that comes after
the end sees the end).

    phase      public state        what it means
    queued     working             its owner runs it soon (its tool's code has not started)
    running    working             its owner runs it; `started`: its code may have begun
    waiting    input_required      an approval / an outside result / the answers to its questions
    done       completed, failed,  its one result (from the result: a success, a failure,
               cancelled           a CANCELLED failure)

Keys (the principal is the second part, as the resilience policies' keys have it, so a
MemoryStore's room per principal holds here too):

    dc:\\0{principal}\\0{id}    the record (msgspec JSON); no store TTL while live, `ttl` once done
    dca:\\0{principal}\\0{id}   a marker per live record (what recovery and `pending` scan)
    dcn:\\0{principal}         how many live records the principal has (`incr`)
    dco:{owner}               an owner's lease (a TTL it renews while it lives)

Questions: a running call's tool may ask several at once (`ctx.elicit` from a nursery); each
open one is in `questions` under its key (the key the tool gave it, else one made from its
content: `question_key`), and the record waits while any is open. An answer moves its key from
`questions` to `answers`, where the run takes it (from any process: `_watch`); the other
questions stay open. A record journaled before (one question: `question_kind`, `question`) reads
as one open question under its key.

This module holds the records, their keys, the pure transitions between phases and the status
they show; the service that runs the calls and the handles are engine/_detached.py.
"""

from __future__ import annotations

import contextvars
import enum
import hashlib
import re
import secrets
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from ..exceptions import CallNotFound
from ..messages import FailureKind, ToolFailure, ToolPending, ToolResult
from ..stores import Store, StoreError
from ..tools import Elicitation, RootsRequest, Sampling

__all__ = [
    "ID",
    "DetachedState",
    "DetachedStatus",
    "Journal",
    "Phase",
    "OpenQuestion",
    "Record",
    "Waiting",
    "approval_question",
    "count_key",
    "detached_run",
    "lease_key",
    "marker_key",
    "new_id",
    "question_key",
    "record_key",
    "state_of",
    "status_of",
]

Phase = Literal["queued", "running", "waiting", "done"]
Waiting = Literal["approval", "outside", "answer"]
Asked = Literal["elicitation", "sampling", "roots"]

ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
"""What a detached call's id may be (a caller may choose it: `detach(..., id=...)`)."""

_ARGUMENTS_SHOWN = 2000  # characters of a call's arguments shown in its approval question


class DetachedState(enum.StrEnum):
    """Where a detached call is (MCP's task statuses)."""

    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class DetachedStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A detached (or deferred) call as it is now: a snapshot.

    Attributes:
        id: the detached call's id.
        principal: who it runs for.
        tool: the tool it calls.
        call_id: the model's id of the call.
        arguments: the arguments it runs with (JSON text; the edited ones once approved so).
        state: working, input_required, completed, failed or cancelled.
        message: what is going on, in words (why it waits, why it ended).
        waiting_for: "approval", "outside" (its result is supplied from outside) or "answer" (its
            tool asked a question); None unless input_required.
        questions: what it asks, by key: the tool's open questions (`Elicitation`, `Sampling`,
            `RootsRequest`; several when it asked them at once; an answered one leaves, the
            others stay), or for an approval `{"approval": Elicitation(approval=True, ...)}`.
            `DetachedCall.answer(response, key=...)` answers one.
        question: the first of `questions` (the one there is, mostly), or None.
        result: its one result, once it ended.
        created_at, updated_at: when it was made and last changed (seconds since the epoch).
        expires_at: while it waits for an approval or an outside result, when it expires; once
            it ended, when it is forgotten; None otherwise.
        ttl: seconds its entry is kept once it ended.
        poll_interval: seconds a poller should wait between looks.
        cancel_requested: a cancel was asked for and has not reached its run yet.
        attempts: how many times its tool's code was started (more than one: an idempotent
            tool run again after its process stopped, or a call resumed from its checkpoint).
        version: grows with every change (`DetachedCall.watch` yields each).
    """

    id: str
    principal: str | None
    tool: str
    call_id: str
    arguments: str
    state: DetachedState
    message: str | None = None
    waiting_for: Waiting | None = None
    question: Elicitation | Sampling | RootsRequest | None = None
    questions: dict[str, Elicitation | Sampling | RootsRequest] = {}
    result: ToolResult | None = None
    created_at: float
    updated_at: float
    expires_at: float | None = None
    ttl: float
    poll_interval: float
    cancel_requested: bool = False
    attempts: int = 0
    version: int = 0

    @property
    def done(self) -> bool:
        """It ended (completed, failed or cancelled)."""
        return self.state in _ENDED


_ENDED = frozenset((DetachedState.COMPLETED, DetachedState.FAILED, DetachedState.CANCELLED))


class OpenQuestion(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A question of a running call's tool, open until answered (`Record.questions`)."""

    kind: Asked
    question: dict[str, Any]


class Record(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One detached or deferred call in the journal (see the module docstring).

    `question_kind`, `question` and `answer` are how a record journaled before several questions
    held its one question: read into `questions` (its answer, which only the run of the process
    that asked could take, is dropped), never written.
    """

    id: str
    principal: str | None = None
    tool: str
    call_id: str
    arguments: str = "{}"
    metadata: dict[str, Any] = {}
    phase: Phase
    waiting: Waiting | None = None
    message: str | None = None
    questions: dict[str, OpenQuestion] = {}  # open, by key (insertion order: asked first, first)
    answers: dict[str, Any] = {}  # answered, by key, until the run takes them
    question_kind: Asked | None = None  # legacy: one question (read into `questions`)
    question: dict[str, Any] | None = None  # legacy
    answer: Any = None  # legacy
    owner: str | None = None
    started: bool = False
    approved: bool = False
    idempotent: bool = False
    cancel: bool = False
    decision: str | None = None  # "approved", "denied", "expired", "cancelled", "supplied"
    attempts: int = 0
    result: ToolResult | None = None
    created: float
    updated: float
    expires: float | None = None
    deadline: float | None = None
    timeout: float | None = None
    ttl: float = 3600.0
    link: str | None = None  # the starter's traceparent: the run's span links to it
    checkpoint: dict[str, Any] = {}  # where its run's work can be picked up (`CallContext.checkpoint`)
    version: int = 0

    def __post_init__(self) -> None:
        if self.question_kind is not None or self.question is not None or self.answer is not None:
            kind, asked = self.question_kind, self.question
            if kind is not None and asked is not None and self.phase == "waiting" and not self.questions:
                self.questions = {question_key(kind, asked): OpenQuestion(kind=kind, question=asked)}
            self.question_kind = self.question = self.answer = None

    @property
    def key(self) -> str:
        return record_key(self.principal, self.id)


_encoder = msgspec.json.Encoder(enc_hook=str)
_decoder = msgspec.json.Decoder(Record)

detached_run: contextvars.ContextVar[Any] = contextvars.ContextVar("runtime_detached_run", default=None)
"""The detached call a task runs (engine/_detached.py's `Run`), for the steps inside it: a
policy or a tool that defers it changes its record instead of making another."""


def unwritable(record: Record) -> str | None:
    """Why `record` cannot be written to the journal (text that is not valid Unicode, such as a
    model's call id with a lone surrogate), or None: it can."""
    try:
        _encoder.encode(record)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"it cannot be journaled ({type(exc).__name__}: {str(exc)[:200]})"
    return None


def new_id() -> str:
    return "dc_" + secrets.token_urlsafe(15).replace("-", "x").replace("_", "y")


def _part(principal: str | None) -> str:
    """A principal in a key: none is empty, a principal (the empty one too) starts with '='."""
    return "" if principal is None else "=" + principal


def principal_of(part: str) -> str | None:
    """The principal a key's part names (`_part` read back)."""
    return part[1:] if part else None


def principal_prefix(principal: str | None) -> str:
    """The part of every key of `principal`'s records, markers and bound that follows their kind."""
    return "\x00" + _part(principal) + "\x00"


def record_key(principal: str | None, detached_id: str) -> str:
    return f"dc:\x00{_part(principal)}\x00{detached_id}"


def marker_key(principal: str | None, detached_id: str) -> str:
    return f"dca:\x00{_part(principal)}\x00{detached_id}"


def count_key(principal: str | None) -> str:
    return f"dcn:\x00{_part(principal)}"


def lease_key(owner: str) -> str:
    return f"dco:{owner}"


def check_lookup(detached_id: object, principal: object) -> tuple[str, str | None]:
    """An id and a principal fit to look up (a NUL in either could reach another principal's
    keys): anything else is not found, as an id of another principal is.

    Raises:
        CallNotFound: the id cannot be one of this principal's.
    """
    if not isinstance(detached_id, str) or not ID.fullmatch(detached_id):
        raise CallNotFound(detached_id)
    if principal is not None and (not isinstance(principal, str) or "\x00" in principal):
        raise CallNotFound(detached_id)
    return detached_id, principal


def state_of(record: Record) -> DetachedState:
    phase = record.phase
    if phase == "waiting":
        return DetachedState.INPUT_REQUIRED
    if phase != "done":
        return DetachedState.WORKING
    result = record.result
    if type(result) is ToolFailure:
        return DetachedState.CANCELLED if result.kind is FailureKind.CANCELLED else DetachedState.FAILED
    if type(result) is ToolPending:  # pragma: no cover - a done record holds a final result
        return DetachedState.FAILED
    return DetachedState.COMPLETED


def approval_question(record: Record) -> Elicitation:
    """The question an approval asks (as `ctx.approve` words it), for a status and for MCP."""
    arguments = record.arguments
    shown = arguments if len(arguments) <= _ARGUMENTS_SHOWN else arguments[:_ARGUMENTS_SHOWN] + "..."
    return Elicitation(
        message=f"Allow the tool {record.tool!r} to run with the arguments {shown}?",
        schema={"type": "object", "properties": {}},
        tool_name=record.tool,
        call_id=record.call_id,
        approval=True,
        arguments=arguments,
    )


_QUESTIONS: dict[str, type[Any]] = {"elicitation": Elicitation, "sampling": Sampling, "roots": RootsRequest}
APPROVAL_KEY = "approval"
"""The key an approval is asked under (`DetachedStatus.questions`, MCP's `inputRequests`)."""
_NOT_KEYED = frozenset(("key", "tool_name", "call_id", "server"))  # who asks, not what


def question_key(kind: str, asked: dict[str, Any]) -> str:
    """The key of a question (its `to_builtins` form): the key its tool gave it, else one made
    from what it asks (the same question asked again, in another run of the call, has the same)."""
    own = asked.get("key")
    if isinstance(own, str) and own:
        return own
    what = {k: v for k, v in asked.items() if k not in _NOT_KEYED}
    digest = hashlib.sha256(msgspec.json.encode([kind, what], order="sorted")).hexdigest()[:12]
    return f"{kind}-{digest}"


def questions_of(record: Record) -> dict[str, Elicitation | Sampling | RootsRequest]:
    """What a waiting record asks, by key (an approval's one question under "approval")."""
    if record.phase != "waiting":
        return {}
    if record.waiting == "approval":
        return {APPROVAL_KEY: approval_question(record)}
    if record.waiting != "answer":
        return {}
    return {
        key: msgspec.convert(open_.question, _QUESTIONS[open_.kind])
        for key, open_ in record.questions.items()
    }


def status_of(record: Record, poll_interval: float) -> DetachedStatus:
    """What a record shows its principal."""
    done = record.phase == "done"
    questions = questions_of(record)
    return DetachedStatus(
        id=record.id,
        principal=record.principal,
        tool=record.tool,
        call_id=record.call_id,
        arguments=record.arguments,
        state=state_of(record),
        message=record.message,
        waiting_for=record.waiting if record.phase == "waiting" else None,
        question=next(iter(questions.values()), None),
        questions=questions,
        result=record.result if done else None,
        created_at=record.created,
        updated_at=record.updated,
        expires_at=record.expires if (done or record.phase == "waiting") else None,
        ttl=record.ttl,
        poll_interval=poll_interval,
        cancel_requested=record.cancel and not done,
        attempts=record.attempts,
        version=record.version,
    )


def failure_of(record: Record, kind: FailureKind, message: str) -> ToolFailure:
    return ToolFailure(call_id=record.call_id, tool=record.tool, kind=kind, message=message)


Change = Callable[[Record], "Record | None"]
"""A transition: the record as it should be next, or None to leave it as it is."""


class Journal:
    """The records in a store, each change one compare-and-set (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def read(self, key: str) -> tuple[bytes | None, Record | None]:
        raw = await self.store.get(key)
        if raw is None:
            return None, None
        try:
            return raw, _decoder.decode(raw)
        except msgspec.DecodeError:  # not a record (a key of another program): as if absent
            return None, None

    async def create(self, record: Record) -> bytes | None:
        """Write a new record; what was written, or None if one with its key exists already."""
        raw = _encoder.encode(record)
        return raw if await self.store.add(record.key, raw) else None

    async def change(
        self, key: str, change: Change, ttl_done: float, known: tuple[bytes, Record] | None = None
    ) -> tuple[Record | None, bool, bytes | None]:
        """Apply `change` to the record at `key` until it takes (another process may change it
        in between: then it is read again and `change` decides anew). `known`: the record as
        it was last read or written here, tried first (one step saved when nobody changed it).
        Returns the record as it is now, whether `change` made it so, and its bytes. A record
        that turns done gets the store TTL `ttl_done` (it is forgotten then).

        Raises:
            StoreError: the store failed, or the record changed under us too often.
        """
        for _ in range(_ATTEMPTS):
            fresh = known is None
            if known is not None:
                raw, record = known
                known = None
            else:
                read, found = await self.read(key)
                if read is None or found is None:
                    return None, False, None
                raw, record = read, found
            changed = change(record)
            if changed is None:
                if fresh:
                    return record, False, raw
                continue  # `known` may be stale: decide on what is there now
            changed.version = record.version + 1
            ttl = ttl_done if changed.phase == "done" else None
            new = _encoder.encode(changed)
            if await self.store.swap(key, raw, new, ttl):
                return _decoder.decode(new), True, new  # as every other reader will see it
        raise StoreError(f"the journal's record {key!r} changed under every attempt ({_ATTEMPTS})")


_ATTEMPTS = 64
