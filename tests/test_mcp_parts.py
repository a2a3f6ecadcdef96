"""Audio, embedded resources and resource links: in the wire types, and as each provider takes them.

Each provider adapter passes what its API accepts (checked with the provider SDK's own types)
and describes the rest in a line of text.
"""

from __future__ import annotations

import msgspec
import pytest
from anthropic.types import ToolResultBlockParam
from google.genai import types as genai_types
from openai.types.chat import ChatCompletionToolMessageParam
from openai.types.responses import ResponseInputItemParam

from runtime import AudioPart, ResourceLinkPart, ResourcePart, TextPart
from runtime.messages import ToolSuccess, decode_result, describe_part, encode_result
from runtime.providers import anthropic as anthropic_adapter
from runtime.providers import gemini as gemini_adapter
from runtime.providers import openai as openai_adapter
from tests.test_providers import validate  # strict, and no key ignored

WAV = b"RIFF\x24\x00\x00\x00WAVE"
PDF = b"%PDF-1.4 tiny"
PARTS = (
    TextPart(text="the report"),
    AudioPart(data=WAV, mime_type="audio/wav"),
    ResourcePart(uri="file:///notes.txt", mime_type="text/plain", text="the notes"),
    ResourcePart(uri="file:///r.pdf", mime_type="application/pdf", blob=PDF),
    ResourcePart(uri="file:///x.bin", blob=b"\x00\x01"),
    ResourceLinkPart(uri="file:///big.csv", name="big.csv", description="all rows"),
)
RESULT = ToolSuccess(call_id="c1", tool="report", content="the report", parts=PARTS)


def test_parts_cross_a_process_boundary_unchanged() -> None:
    assert decode_result(encode_result(RESULT)) == RESULT
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(RESULT), type=ToolSuccess) == RESULT


def test_a_resource_has_text_or_blob_not_both() -> None:
    with pytest.raises(ValueError, match="exactly one of text and blob"):
        ResourcePart(uri="file:///a")
    with pytest.raises(ValueError, match="exactly one of text and blob"):
        ResourcePart(uri="file:///a", text="t", blob=b"b")


def test_openai_is_told_in_text() -> None:
    (message,) = openai_adapter.result_messages([RESULT])
    validate(ChatCompletionToolMessageParam, message)
    texts = [c["text"] for c in message["content"]]
    assert texts == [describe_part(p) for p in PARTS]
    assert texts[1] == "[audio (audio/wav, 12 bytes)]"
    assert texts[2] == "the notes"
    assert texts[5] == "[resource big.csv (file:///big.csv): all rows]"
    (item,) = openai_adapter.result_items([RESULT])
    validate(ResponseInputItemParam, item)
    assert [o["type"] for o in item["output"]] == ["input_text"] * 6


def test_anthropic_takes_the_pdf_as_a_document() -> None:
    (block,) = anthropic_adapter.result_blocks([RESULT])
    validate(ToolResultBlockParam, block)
    kinds = [c["type"] for c in block["content"]]
    assert kinds == ["text", "text", "text", "document", "text", "text"]
    assert block["content"][3]["source"]["media_type"] == "application/pdf"
    assert block["content"][4]["text"] == "[binary resource file:///x.bin (unknown type, 2 bytes)]"


def test_gemini_takes_audio_and_pdf_inline() -> None:
    (part,) = gemini_adapter.result_parts([RESULT])
    parsed = genai_types.Part.model_validate(part)
    assert parsed.function_response is not None
    media = parsed.function_response.parts or []
    assert [(m.inline_data.mime_type, m.inline_data.data) for m in media if m.inline_data] == [
        ("audio/wav", WAV),
        ("application/pdf", PDF),
    ]
    output = (parsed.function_response.response or {})["output"]
    assert "the notes" in output
    assert "[resource big.csv (file:///big.csv): all rows]" in output
