"""The contract layer's internal port: what the authoring layer and MCP use of it (how a Python
type or a JSON Schema becomes the IR, and back). Not for applications: these names follow the
layers that use them.
"""

from ._annotations import field_default as field_default
from ._annotations import normalize as normalize
from ._docstring import attribute_docs as attribute_docs
from ._from_python import descriptor_from_fields as descriptor_from_fields
from ._from_python import descriptor_from_type as descriptor_from_type
from ._from_python import output_type as output_type
from ._from_python import own_doc as own_doc
from ._from_python import shown_default as shown_default
from ._notes import json_type as json_type
from ._nulls import OmittedNulls as OmittedNulls
from ._nulls import omitted_nulls as omitted_nulls
from ._pydantic import adapter as adapter
from ._pydantic import invalid as invalid
from ._pydantic import is_model as is_model
from ._pydantic import mentions_model as mentions_model
from ._to_jsonschema import output_document as output_document

__all__ = [
    "OmittedNulls",
    "adapter",
    "attribute_docs",
    "descriptor_from_fields",
    "descriptor_from_type",
    "field_default",
    "invalid",
    "is_model",
    "json_type",
    "mentions_model",
    "normalize",
    "omitted_nulls",
    "output_document",
    "output_type",
    "own_doc",
    "shown_default",
]
