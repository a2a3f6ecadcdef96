"""The tools the MCP conformance suite's server scenarios call, as runtime tools.

Served by `python -m runtime serve conformance.server:registry --http 127.0.0.1:PORT`
(see conformance/run.py). Each tool is written the way a user of the runtime would write it:
multimodal results through `result_to_parts`, progress and logging through the CallContext,
the JSON Schema 2020-12 tool declared with its schema as given.
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import trio

from runtime import (
    AudioPart,
    CallContext,
    ContentPart,
    ImagePart,
    ResourcePart,
    TextPart,
    Tool,
    ToolRegistry,
    fail,
    tool,
)
from runtime.mcp import JsonSchemaTool

# A 1x1 red pixel and a 1-sample WAV file: the smallest valid media.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
WAV = base64.b64decode("UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA==")


class NoArgs(msgspec.Struct, frozen=True):
    """No arguments."""


class PartsTool(Tool[NoArgs, list[ContentPart]]):
    """A tool whose result is a list of content parts, shown to the model as they are."""

    parts: tuple[ContentPart, ...] = ()

    async def execute(self, args: NoArgs) -> list[ContentPart]:
        return list(self.parts)

    def result_to_text(self, result: list[ContentPart]) -> str:
        return "\n".join(p.text for p in result if isinstance(p, TextPart))

    def result_to_parts(self, result: list[ContentPart]) -> list[ContentPart]:
        return result


class TestImageContent(PartsTool):
    """Return a 1x1 PNG image."""

    name = "test_image_content"
    parts = (ImagePart(data=PNG, mime_type="image/png"),)


class TestAudioContent(PartsTool):
    """Return a tiny WAV file."""

    name = "test_audio_content"
    parts = (AudioPart(data=WAV, mime_type="audio/wav"),)


class TestEmbeddedResource(PartsTool):
    """Return an embedded text resource."""

    name = "test_embedded_resource"
    parts = (
        ResourcePart(
            uri="test://embedded-resource",
            mime_type="text/plain",
            text="This is an embedded resource content.",
        ),
    )


class TestMultipleContentTypes(PartsTool):
    """Return text, an image and an embedded resource."""

    name = "test_multiple_content_types"
    parts = (
        TextPart(text="Multiple content types test:"),
        ImagePart(data=PNG, mime_type="image/png"),
        ResourcePart(
            uri="test://mixed-content-resource",
            mime_type="application/json",
            text='{"test":"data","value":123}',
        ),
    )


@tool
def test_simple_text() -> str:
    """Return a simple text."""
    return "This is a simple text response for testing."


@tool
def test_error_handling() -> str:
    """Always fail."""
    fail("This tool intentionally returns an error for testing")


@tool
async def test_tool_with_progress(ctx: CallContext) -> str:
    """Report progress 0, 50 and 100 of 100, about 50 ms apart."""
    for step in (0, 50, 100):
        if step:
            await trio.sleep(0.05)
        await ctx.report_progress(step, total=100, message=f"{step}%")
    return "Progress reporting completed"


@tool
async def test_tool_with_logging(ctx: CallContext) -> str:
    """Log three messages at info level, about 50 ms apart."""
    await ctx.log("info", "Tool execution started")
    await trio.sleep(0.05)
    await ctx.log("info", "Tool processing data")
    await trio.sleep(0.05)
    await ctx.log("info", "Tool execution completed")
    return "Logging completed"


@tool
async def test_logging_tool(ctx: CallContext) -> str:
    """Log at every level (2026-07-28: sent only at or above the level the request asks for)."""
    for level in ("debug", "info", "warning", "error"):
        await ctx.log(level, f"a {level} message")
    return "Logged"


@tool
async def test_reconnection() -> str:
    """Run longer than the server's --sse-poll-after, so the client polls for the result."""
    await trio.sleep(0.5)
    return "Reconnection test completed"


SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


async def _contact(arguments: dict[str, Any], ctx: CallContext) -> str:
    return f"contact {arguments.get('name', '?')}"


json_schema_2020_12_tool = JsonSchemaTool(
    "json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", SCHEMA_2020_12, _contact
)

registry = ToolRegistry(
    [
        test_simple_text,
        TestImageContent(),
        TestAudioContent(),
        TestEmbeddedResource(),
        TestMultipleContentTypes(),
        test_error_handling,
        test_tool_with_progress,
        test_tool_with_logging,
        test_logging_tool,
        test_reconnection,
        json_schema_2020_12_tool,
    ]
)

# The tools that ask back (issue 15): sampling, elicitation, roots, input-required results.
from conformance.server_asking import ASKING  # noqa: E402

registry = registry | ASKING

# The MCP Tasks fixtures (issue 43): calls that become tasks (detached calls).
from conformance.server_tasks import TASKS  # noqa: E402

registry = registry | TASKS
