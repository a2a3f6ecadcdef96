"""Questions between a tool and an MCP peer: our types <-> the SDK's, both directions.

Server side (`ServedAsker`): a served tool's `ctx.elicit` / `ctx.sample` / `ctx.list_roots`
become requests to the MCP client, if the client announced the capability (else `CannotAsk`
at once, never a hang):

- 2025-11-25: `elicitation/create`, `sampling/createMessage`, `roots/list` on the request's
  own stream (related to the `tools/call`).
- 2026-07-28: the input-required flow (SEP-2322). An unanswered question ends the round: the
  `tools/call` is answered with an `InputRequiredResult` holding every question asked so far
  (questions a tool asks at once, from a nursery, go out together) and a `requestState` with
  the answers of earlier rounds, sealed and verified by the SDK's `RequestStateBoundary` (AES-GCM,
  bound to the tool and its arguments, with an expiry): a tampered state is refused. When the
  client calls again with the answers, the tool runs again from the start and each question it
  asks again is answered from them (a question is keyed by its content, so the order of
  concurrent questions does not matter). A tool that asks should therefore do its side
  effects after asking (as `requires_approval` does).

Client side (`client_callbacks`): a server's requests are answered by the runtime's handlers
(`open_runtime(on_elicit=..., on_sample=..., on_roots=...)`); a capability is announced only
when its handler is given.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import mcp_types as types
import msgspec
import pydantic
import trio
from mcp import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..engine.lowlevel import question_key
from ..exceptions import CannotAsk, ToolUnavailable
from ..messages import AudioPart, ImagePart, TextPart
from ..tools import Answer, Elicitation, Root, RootsRequest, Sampled, Sampling, SamplingMessage
from ..tools.lowlevel import Asker

__all__ = ["InputRequired", "ServedAsker", "client_callbacks"]

log = logging.getLogger("runtime.mcp")

R = TypeVar("R", bound=pydantic.BaseModel)
A = TypeVar("A")
_SETTLE_CHECKPOINTS = 3  # scheduler turns a question waits for its siblings to ask too


class InputRequired(ToolUnavailable):
    """This round of a 2026-07-28 call ends: the client is asked and calls again.

    Not a `CannotAsk`: a tool that catches CannotAsk (to go on without an answer) still ends
    the round here, and is asked again with the answer in the next one.
    """


# -- our types -> the SDK's ------------------------------------------------------------


def elicit_params(question: Elicitation) -> types.ElicitRequestFormParams:
    return types.ElicitRequestFormParams(message=question.message, requested_schema=question.schema)


def sampling_params(request: Sampling) -> types.CreateMessageRequestParams:
    preferences = (
        types.ModelPreferences(hints=[types.ModelHint(name=h) for h in request.model_hints])
        if request.model_hints
        else None
    )
    return types.CreateMessageRequestParams(
        messages=[
            types.SamplingMessage(role=m.role, content=_sdk_content(m.content)) for m in request.messages
        ],
        max_tokens=request.max_tokens,
        system_prompt=request.system_prompt,
        temperature=request.temperature,
        stop_sequences=list(request.stop_sequences) or None,
        metadata=request.metadata,
        include_context=request.include_context,
        model_preferences=preferences,
    )


def _sdk_content(content: str | TextPart | ImagePart | AudioPart) -> types.SamplingContent:
    if isinstance(content, str):
        return types.TextContent(text=content)
    if isinstance(content, TextPart):
        return types.TextContent(text=content.text)
    data = base64.b64encode(content.data).decode()
    if isinstance(content, ImagePart):
        return types.ImageContent(data=data, mime_type=content.mime_type)
    return types.AudioContent(data=data, mime_type=content.mime_type)


def answer_of(result: types.ElicitResult) -> Answer:
    return Answer(action=result.action, content=dict(result.content) if result.content is not None else None)


def sampled_of(result: types.CreateMessageResult | types.CreateMessageResultWithTools) -> Sampled:
    content = result.content
    blocks = content if isinstance(content, list) else [content]
    text = "".join(b.text for b in blocks if isinstance(b, types.TextContent))
    return Sampled(text=text, model=result.model, stop_reason=result.stop_reason, role=result.role)


def roots_of(result: types.ListRootsResult) -> list[Root]:
    return [Root(uri=str(r.uri), name=r.name) for r in result.roots]


# -- the SDK's types -> ours -----------------------------------------------------------


def question_of(params: types.ElicitRequestParams) -> Elicitation | None:
    if not isinstance(params, types.ElicitRequestFormParams):
        return None
    schema = params.requested_schema
    return Elicitation(
        message=params.message,
        schema=schema if isinstance(schema, dict) else schema.model_dump(by_alias=True, exclude_none=True),
    )


def sampling_of(params: types.CreateMessageRequestParams) -> Sampling:
    messages: list[SamplingMessage] = []
    for m in params.messages:
        blocks = m.content if isinstance(m.content, list) else [m.content]
        for block in blocks:
            if isinstance(block, types.TextContent):
                messages.append(SamplingMessage(role=m.role, content=block.text))
            elif isinstance(block, types.ImageContent):
                part = ImagePart(data=base64.b64decode(block.data), mime_type=block.mime_type)
                messages.append(SamplingMessage(role=m.role, content=part))
            elif isinstance(block, types.AudioContent):
                audio = AudioPart(data=base64.b64decode(block.data), mime_type=block.mime_type)
                messages.append(SamplingMessage(role=m.role, content=audio))
    hints = params.model_preferences.hints if params.model_preferences is not None else None
    return Sampling(
        messages=tuple(messages),
        max_tokens=params.max_tokens,
        system_prompt=params.system_prompt,
        temperature=params.temperature,
        stop_sequences=tuple(params.stop_sequences or ()),
        model_hints=tuple(h.name for h in hints or () if h.name),
        include_context=params.include_context,
        metadata=params.metadata,
    )


def with_defaults(content: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """An accepted answer with the schema's defaults for the fields it leaves out (SEP-1034)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return content
    filled = dict(content)
    for name, prop in properties.items():
        if name not in filled and isinstance(prop, dict) and "default" in prop:
            filled[name] = prop["default"]
    return filled


def client_callbacks(
    asker: Asker | None,
    *,
    server: str | None = None,
    who: Callable[[], tuple[str | None, str | None]] | None = None,
) -> dict[str, Any]:
    """The SDK `Client` callbacks that answer a server with `asker`'s handlers (only those given,
    so only those capabilities are announced).

    Args:
        asker: the runtime's handlers.
        server: the server's name, put on each question (`Elicitation.server`...).
        who: (tool name, call id) of the runtime call a question belongs to, when known.
    """
    if asker is None:
        return {}
    callbacks: dict[str, Any] = {}
    on_elicit, on_sample, on_roots = asker.on_elicit, asker.on_sample, asker.on_roots

    def identity() -> dict[str, Any]:
        tool_name, call_id = who() if who is not None else (None, None)
        return {"server": server, "tool_name": tool_name, "call_id": call_id}

    if on_elicit is not None:

        async def elicitation(
            context: Any, params: types.ElicitRequestParams
        ) -> types.ElicitResult | types.ErrorData:
            question = question_of(params)
            if question is None:  # URL mode: nothing our handlers can show
                return types.ElicitResult(action="decline")
            question = msgspec.structs.replace(question, **identity())
            try:
                answer = await on_elicit(question)
            except Exception as exc:
                log.warning("the elicitation handler failed for an MCP server's request", exc_info=True)
                return types.ErrorData(code=types.INTERNAL_ERROR, message=f"{type(exc).__name__}: {exc}")
            if answer.action != "accept":
                return types.ElicitResult(action=answer.action)
            return types.ElicitResult(
                action="accept", content=with_defaults(answer.content or {}, question.schema)
            )

        callbacks["elicitation_callback"] = elicitation
    if on_sample is not None:

        async def sampling(context: Any, params: types.CreateMessageRequestParams) -> Any:
            try:
                reply = await on_sample(msgspec.structs.replace(sampling_of(params), **identity()))
            except Exception as exc:
                log.warning("the sampling handler failed for an MCP server's request", exc_info=True)
                return types.ErrorData(code=types.INTERNAL_ERROR, message=f"{type(exc).__name__}: {exc}")
            return types.CreateMessageResult(
                role=reply.role,
                content=types.TextContent(text=reply.text),
                model=reply.model,
                stop_reason=reply.stop_reason,
            )

        callbacks["sampling_callback"] = sampling
    if on_roots is not None:

        async def list_roots(context: Any) -> types.ListRootsResult | types.ErrorData:
            try:
                roots = await on_roots(RootsRequest(**identity()))
            except Exception as exc:
                log.warning("the roots handler failed for an MCP server's request", exc_info=True)
                return types.ErrorData(code=types.INTERNAL_ERROR, message=f"{type(exc).__name__}: {exc}")
            return types.ListRootsResult(roots=[types.Root(uri=r.uri, name=r.name) for r in roots])  # type: ignore[arg-type]

        callbacks["list_roots_callback"] = list_roots
    return callbacks


# -- the served side -------------------------------------------------------------------


class ServedAsker:
    """The questions of one served `tools/call`: asked of the client that made the call."""

    def __init__(self, session: Any, request_id: Any, params: types.CallToolRequestParams) -> None:
        self._session = session
        self._request_id = request_id
        self.modern = session.protocol_version in MODERN_PROTOCOL_VERSIONS
        self.pending: dict[str, types.InputRequest] = {}
        self.missing = types.ClientCapabilities()  # what the tool needed and the client did not declare
        self._answers: dict[str, Any] = {}  # key -> the client's response (JSON), earlier rounds included
        # the questions this round answered from the client's responses, by the key a detached
        # run of the call asks them under (`question_key`) -> the answer (`to_builtins`)
        self.given: dict[str, Any] = {}
        self._seen: dict[str, int] = {}
        self._times: dict[str, int] = {}  # question_key -> how often a question under it was answered
        if self.modern:
            self._answers = _state_answers(params.request_state)
            for key, response in (params.input_responses or {}).items():
                self._answers[key] = response.model_dump(by_alias=True, mode="json", exclude_none=True)

    def handlers(self) -> dict[str, Any]:
        """The `asking(...)` keywords that send the tool's questions to this client."""
        return {"on_elicit": self._elicit, "on_sample": self._sample, "on_roots": self._roots}

    @property
    def capabilities(self) -> types.ClientCapabilities:
        return self._session.client_capabilities or types.ClientCapabilities()

    # The three handlers.

    async def _elicit(self, question: Elicitation) -> Answer:
        elicitation = self.capabilities.elicitation
        if elicitation is None or (elicitation.form is None and elicitation.url is not None):
            self.missing.elicitation = types.ElicitationCapability(form=types.FormElicitationCapability())
            raise CannotAsk(_unannounced("elicitation (form)", "elicit"))
        params = elicit_params(question)
        if self.modern:
            result = await self._input(question.key, types.ElicitRequest(params=params), types.ElicitResult)
            return self._given("elicitation", question, answer_of(result))
        result = await self._session.elicit_form(
            question.message, params.requested_schema, related_request_id=self._request_id
        )
        return answer_of(result)

    async def _sample(self, request: Sampling) -> Sampled:
        if self.capabilities.sampling is None:
            self.missing.sampling = types.SamplingCapability()
            raise CannotAsk(_unannounced("sampling", "sample"))
        params = sampling_params(request)
        if self.modern:
            sampled = await self._input(
                request.key, types.CreateMessageRequest(params=params), types.CreateMessageResult
            )
            return self._given("sampling", request, sampled_of(sampled))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            result = await self._session.create_message(
                params.messages,
                max_tokens=params.max_tokens,
                system_prompt=params.system_prompt,
                include_context=params.include_context,
                temperature=params.temperature,
                stop_sequences=params.stop_sequences,
                metadata=params.metadata,
                model_preferences=params.model_preferences,
                related_request_id=self._request_id,
            )
        return sampled_of(result)

    async def _roots(self, request: RootsRequest) -> Sequence[Root]:
        if self.capabilities.roots is None:
            self.missing.roots = types.RootsCapability()
            raise CannotAsk(_unannounced("roots", "list_roots"))
        if self.modern:
            roots = await self._input(request.key, types.ListRootsRequest(), types.ListRootsResult)
            return self._given("roots", request, roots_of(roots))
        result = await self._session.send_request(
            types.ListRootsRequest(),
            types.ListRootsResult,
            metadata=_related(self._request_id),
        )
        return roots_of(result)

    def _given(self, kind: str, question: Any, answer: A) -> A:
        # a question asked again (a loop asking under one key) is `key-2`, `key-3`... the n-th
        # time, as the detached run looks its answers up: each keeps its own answer
        key = question_key(kind, msgspec.to_builtins(question))
        n = self._times[key] = self._times.get(key, 0) + 1
        self.given[key if n == 1 else f"{key}-{n}"] = msgspec.to_builtins(answer)
        return answer

    # 2026-07-28: answered from this round's responses and earlier rounds' state, or asked.

    async def _input(self, key: str | None, request: types.InputRequest, answer_type: type[R]) -> R:
        if key is None:  # named by its content, so questions asked at once may come in any order
            wire = request.model_dump(by_alias=True, mode="json", exclude_none=True)
            digest = hashlib.sha256(json.dumps(wire, sort_keys=True).encode()).hexdigest()[:16]
            key = f"{request.method.split('/')[0]}-{digest}"
        n = self._seen.get(key, 0)
        self._seen[key] = n + 1
        if n:
            key = f"{key}-{n + 1}"
        if key in self._answers:
            try:
                return answer_type.model_validate(self._answers[key])
            except pydantic.ValidationError:  # not an answer to this question: asked again
                log.info("input response %r does not answer its request; asking again", key)
                del self._answers[key]
        self.pending[key] = request
        for _ in range(_SETTLE_CHECKPOINTS):  # questions asked at once (a nursery) go out together
            await trio.lowlevel.checkpoint()
        raise InputRequired(
            "it needs input from the MCP client; the call is answered with input requests and made again"
        )

    def missing_capability(self) -> MCPError:
        """2026-07-28: the error for a call that failed because the client did not declare a
        capability it needed (MissingRequiredClientCapabilityError, -32021; HTTP 400)."""
        required = self.missing.model_dump(by_alias=True, mode="json", exclude_none=True)
        return MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"the MCP client did not declare the capabilities this tool needs: {', '.join(required)}",
            data=types.MissingRequiredClientCapabilityErrorData(
                required_capabilities=self.missing
            ).model_dump(by_alias=True, mode="json", exclude_none=True),
        )

    def input_required(self) -> types.InputRequiredResult:
        """The answer to this round: the questions asked and the answers so far (sealed by the
        SDK's RequestStateBoundary on the way out)."""
        state = json.dumps({"v": 1, "answers": self._answers}, separators=(",", ":"), sort_keys=True)
        return types.InputRequiredResult(input_requests=dict(self.pending), request_state=state)


def _state_answers(state: str | None) -> dict[str, Any]:
    """The answers of earlier rounds, from the request state (already verified and unsealed by
    the RequestStateBoundary: anything else was refused before the handler ran)."""
    if not state:
        return {}
    try:
        decoded = json.loads(state)
    except ValueError:
        return {}
    answers = decoded.get("answers") if isinstance(decoded, dict) else None
    return dict(answers) if isinstance(answers, dict) else {}


def _related(request_id: Any) -> ServerMessageMetadata:
    return ServerMessageMetadata(related_request_id=request_id)


def _unannounced(capability: str, method: str) -> str:
    return (
        f"it asked the MCP client ({method}), and the client did not announce the {capability} "
        "capability, so no one can answer"
    )
