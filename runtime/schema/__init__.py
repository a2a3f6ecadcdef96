"""The contract layer: the tool IR, Python types and JSON Schemas into it, dialects out of it.

The public surface is what a user needs to read or build a tool's description by hand:
the IR (`ToolDescriptor`, `ToolParameter` and the type nodes), the ways into it (a Python
type, a JSON Schema, a docstring) and the way out (`render_tool` for one provider). The
renderers of each dialect and the builders the runtime uses live in the private modules.
"""

from ._dialects import DIALECTS as DIALECTS
from ._dialects import render_tool as render_tool
from ._docstring import Docstring as Docstring
from ._docstring import parse_docstring as parse_docstring
from ._from_jsonschema import descriptor_from_json_schema as descriptor_from_json_schema
from ._from_jsonschema import parse_json_schema as parse_json_schema
from ._from_python import descriptor_from_type as descriptor_from_type
from ._from_python import type_node as type_node
from ._ir import AnyValue as AnyValue
from ._ir import Array as Array
from ._ir import Boolean as Boolean
from ._ir import Enum as Enum
from ._ir import Integer as Integer
from ._ir import Null as Null
from ._ir import Number as Number
from ._ir import Object as Object
from ._ir import Ref as Ref
from ._ir import String as String
from ._ir import ToolDescriptor as ToolDescriptor
from ._ir import ToolParameter as ToolParameter
from ._ir import TypeNode as TypeNode
from ._ir import Union as Union
from ._openai import strict_fallback_reason as strict_fallback_reason

__all__ = [
    "DIALECTS",
    "AnyValue",
    "Array",
    "Boolean",
    "Docstring",
    "Enum",
    "Integer",
    "Null",
    "Number",
    "Object",
    "Ref",
    "String",
    "ToolDescriptor",
    "ToolParameter",
    "TypeNode",
    "Union",
    "descriptor_from_json_schema",
    "descriptor_from_type",
    "parse_docstring",
    "parse_json_schema",
    "render_tool",
    "strict_fallback_reason",
    "type_node",
]
