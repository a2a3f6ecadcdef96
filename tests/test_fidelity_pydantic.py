"""Issue 25, point 11: pydantic models as parameters, args types and results, where the user has them.

The schema is the model's own, validation is pydantic's (its validators and config run), and
a refusal reads as msgspec's do: the same texts at the same JSON paths. msgspec stays the path
for everything else: a tool without pydantic types never imports pydantic.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import jsonschema
import msgspec
import pydantic
import pytest
from openai.types.chat import ChatCompletionToolParam

from runtime import FailureKind, Tool, ToolCall, ToolRegistry, open_runtime, tool
from runtime.schema import render_tool


class Address(pydantic.BaseModel):
    """Where a parcel goes."""

    street: str
    city: str = pydantic.Field(description="the city")
    zip_code: str = pydantic.Field("00000", pattern=r"^\d{5}$")


class Parcel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    weight: float = pydantic.Field(gt=0)
    to: Address
    tags: list[str] = []

    @pydantic.field_validator("tags")
    @classmethod
    def lower(cls, tags: list[str]) -> list[str]:
        return [t.lower() for t in tags]  # pydantic's own validators run


class AddressStruct(msgspec.Struct, forbid_unknown_fields=True):
    street: str
    city: str
    zip_code: str = "00000"


class ParcelStruct(msgspec.Struct, forbid_unknown_fields=True):
    weight: float
    to: AddressStruct
    tags: list[str] = []


@tool
def ship(parcel: Parcel, express: bool = False) -> str:
    """Ship a parcel."""
    return f"{parcel.to.city}:{parcel.weight}:{parcel.tags}:{express}"


@tool
def ship_struct(parcel: ParcelStruct, express: bool = False) -> str:
    """Ship a parcel (msgspec types)."""
    return f"{parcel.to.city}:{parcel.weight}:{parcel.tags}:{express}"


class Receipt(pydantic.BaseModel):
    tracking: str
    cost: float


class ShipArgs(pydantic.BaseModel):
    """Ship it."""

    parcel: Parcel
    priority: int = pydantic.Field(1, ge=1, le=3, description="1 is the fastest")


class Shipper(Tool[ShipArgs, Receipt]):
    """Ship a parcel and get a receipt."""

    name = "shipper"

    async def execute(self, args: ShipArgs) -> Receipt:
        return Receipt(tracking=f"T-{args.priority}-{args.parcel.to.city}", cost=args.parcel.weight * 2)


async def _call(t: Any, arguments: str | dict[str, Any]) -> Any:
    async with open_runtime(ToolRegistry([t]), tracing=False) as rt:
        return await rt.call(ToolCall(id="c1", name=t.name, arguments=arguments))


def test_a_pydantic_parameter_is_described_by_its_models_schema() -> None:
    params = render_tool(ship.descriptor, "jsonschema")["parameters"]
    parcel = params["properties"]["parcel"]
    assert parcel["additionalProperties"] is False  # extra="forbid"
    assert parcel["properties"]["weight"] == {"type": "number", "exclusiveMinimum": 0}
    address = parcel["properties"]["to"]
    assert address["description"] == "Where a parcel goes."
    assert address["properties"]["city"]["description"] == "the city"
    assert address["properties"]["zip_code"] == {"type": "string", "pattern": r"^\d{5}$", "default": "00000"}
    assert "$defs" not in params  # written where used (issue 25, point 14)


def test_a_pydantic_parameter_renders_for_openai_strict_as_the_sdk_accepts() -> None:
    rendered = render_tool(ship.descriptor, "openai", strict=True)
    pydantic.TypeAdapter(ChatCompletionToolParam).validate_python(rendered, strict=True)
    assert rendered["function"]["strict"] is True


async def test_a_pydantic_parameter_is_validated_by_pydantic() -> None:
    result = await _call(
        ship, {"parcel": {"weight": 2, "to": {"street": "1 Main", "city": "Oslo"}, "tags": ["FRAGILE"]}}
    )
    assert result.content == "Oslo:2.0:['fragile']:False"  # the model's validator lowered the tag


BAD = [
    ('{"parcel": {"weight": "heavy", "to": {"street": "s", "city": "c"}}}', "$.parcel.weight"),
    ('{"parcel": {"weight": 1, "to": {"street": "s"}}}', "$.parcel.to.city"),
    ('{"parcel": {"weight": 1, "to": {"street": "s", "city": "c"}, "colour": "red"}}', "$.parcel.colour"),
    ('{"parcel": {"weight": 1, "to": {"street": 5, "city": "c"}}}', "$.parcel.to.street"),
    ('{"parcel": {"weight": 1, "to": {"street": "s", "city": "c"}, "tags": "x"}}', "$.parcel.tags"),
    ('{"parcel": {"weight": 1, "to": "Oslo"}}', "$.parcel.to"),
    ("{}", "$.parcel"),
]


@pytest.mark.parametrize(("arguments", "path"), BAD)
async def test_a_pydantic_refusal_reads_as_the_same_msgspec_refusal(arguments: str, path: str) -> None:
    with_pydantic = await _call(ship, arguments)
    with_msgspec = await _call(ship_struct, arguments)
    assert with_pydantic.kind is FailureKind.INVALID_ARGUMENTS
    assert with_msgspec.kind is FailureKind.INVALID_ARGUMENTS
    assert f"`{path}`" in with_pydantic.message
    assert with_pydantic.message.replace("'ship'", "'ship_struct'") == with_msgspec.message


async def test_a_pydantic_args_model_and_result_model_make_a_class_tool() -> None:
    params = render_tool(Shipper.descriptor, "jsonschema")["parameters"]
    assert params["properties"]["priority"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 3,
        "default": 1,
        "description": "1 is the fastest",
    }
    assert params["required"] == ["parcel"]
    output = render_tool(Shipper.descriptor, "mcp")["outputSchema"]
    assert output["required"] == ["tracking", "cost"]
    parcel = {"weight": 1.5, "to": {"street": "s", "city": "Rome"}}
    result = await _call(Shipper(), {"parcel": parcel, "priority": None})  # strict mode's "not sent"
    assert result.ok, result.content
    assert result.value == Receipt(tracking="T-1-Rome", cost=3.0)
    jsonschema.validate(msgspec.json.decode(result.content), output)
    refused = await _call(Shipper(), {"parcel": parcel, "priority": 9})
    assert "`$.priority`: Expected `int` <= 3" in refused.message


def test_tools_without_pydantic_types_never_import_pydantic() -> None:
    code = (
        "import sys, msgspec\n"
        "from runtime import tool, ToolRegistry\n"
        "class P(msgspec.Struct):\n    x: int\n"
        "@tool\ndef f(p: P, n: int = 1) -> P:\n    return p\n"
        'f.decode_args(\'{"p": {"x": 1}}\'); f.result_presenter()(f.fn(P(x=1)))\n'
        "ToolRegistry([f]).schemas('openai', strict=True)\n"
        "assert 'pydantic' not in sys.modules, 'pydantic was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
