"""What a JSON Schema requires of an object beyond its properties, in words for the model.

The IR keeps a schema's shape: properties, their types, `required`. Keywords that only
constrain an object (an `anyOf` of required names, `oneOf` of shapes, `not`, `if`/`then`/
`else`, `dependentRequired`, `minProperties`) have no IR form, and the providers shown the IR
could not carry them anyway (OpenAI and Anthropic refuse `anyOf` at the top of a tool's
parameters). So they are said in the description; the tool's own check (the JSON Schema
validator of a `JsonSchemaTool`, an MCP server) still enforces them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ._ir import Object, Ref, TypeNode, Union

__all__ = ["CONSTRAINT_KEYS", "SHAPE_KEYS", "constraint_notes", "has_shape", "shape_notes"]

# Keys that give a schema a shape of its own; a schema without any only constrains (`required`, `not`...).
SHAPE_KEYS = frozenset(
    {
        "type",
        "$ref",
        "properties",
        "additionalProperties",
        "patternProperties",
        "items",
        "prefixItems",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
    }
)
COMBINATORS = frozenset({"anyOf", "oneOf", "allOf"})
# Keywords that constrain an object beyond its properties (their words go to the description).
CONSTRAINT_KEYS = frozenset(
    {"anyOf", "oneOf", "allOf", "not", "dependentRequired", "if", "minProperties", "maxProperties"}
)


def has_shape(schema: Any) -> bool:
    """Whether `schema` gives a value a shape (a type, properties...), not only constrains it.

    `{"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}` only constrains: its options do.
    """
    if not isinstance(schema, Mapping):
        return False
    keys = SHAPE_KEYS.intersection(schema)
    if not keys:
        return False
    if keys <= COMBINATORS:
        return any(
            has_shape(option) for key in keys if isinstance(schema[key], list) for option in schema[key]
        )
    return True


def _listed(names: list[str], word: str = "and") -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} {word} {quoted[-1]}"


def _alternatives(options: Any) -> list[str] | None:
    """`[{"required": ["a"]}, {"required": ["b", "c"]}]` -> ["`a`", "`b` and `c`"], else None."""
    if not isinstance(options, list) or not options:
        return None
    sets = []
    for option in options:
        if not isinstance(option, Mapping) or has_shape(option):
            return None
        required = option.get("required")
        if not isinstance(required, list) or not required or not all(isinstance(r, str) for r in required):
            return None
        sets.append(_listed(required))
    return sets


def constraint_notes(schema: Mapping[str, Any]) -> list[str]:
    """What an object schema requires beyond its properties and `required`, in words for the model.

    The IR keeps the shape; these keywords only constrain it, and the dialects rendered from
    the IR cannot carry them (OpenAI and Anthropic refuse `anyOf` at the top of a tool's
    parameters): the description says them, and the tool's own check enforces them.
    """
    notes: list[str] = []
    for key, lead in (("anyOf", "Requires"), ("oneOf", "Requires exactly one of")):
        sets = _alternatives(schema.get(key))
        if sets:
            notes.append(f"{lead} {' or '.join(sets)}.")
    for part in schema.get("allOf") or ():
        if isinstance(part, Mapping) and not has_shape(part):
            notes.extend(constraint_notes(part))
    negated = schema.get("not")
    if isinstance(negated, Mapping):
        names = negated.get("required")
        sets = _alternatives(negated.get("anyOf"))
        if isinstance(names, list) and names and all(isinstance(n, str) for n in names) and len(negated) == 1:
            notes.append(
                f"Must not give {_listed(names)} together."
                if len(names) > 1
                else f"Must not give {_listed(names)}."
            )
        elif sets:
            notes.append(f"Must not give {' or '.join(sets)}.")
    dependent = schema.get("dependentRequired")
    if isinstance(dependent, Mapping):
        for name, needs in dependent.items():
            if isinstance(needs, list) and needs:
                notes.append(f"`{name}` requires {_listed([str(n) for n in needs])}.")
    if "if" in schema and ("then" in schema or "else" in schema):
        notes.append(_condition_note(schema))
    low, high = schema.get("minProperties"), schema.get("maxProperties")
    if isinstance(low, int) and low > 0:
        notes.append(f"Give at least {low} argument{'s' if low != 1 else ''}.")
    if isinstance(high, int):
        notes.append(f"Give at most {high} argument{'s' if high != 1 else ''}.")
    return notes


def _condition_note(schema: Mapping[str, Any]) -> str:
    """`if`/`then`/`else` in words when it has the common form (a property's value picks what is
    required), else a pointer to the rule."""
    condition = schema["if"]
    then, otherwise = schema.get("then"), schema.get("else")
    when = None
    if isinstance(condition, Mapping):
        props = condition.get("properties")
        if isinstance(props, Mapping) and len(props) == 1:
            ((name, rule),) = props.items()
            if isinstance(rule, Mapping) and "const" in rule:
                when = f"When `{name}` is {msgspec.json.encode(rule['const']).decode()}"
            elif isinstance(rule, Mapping) and isinstance(rule.get("enum"), list):
                shown = " or ".join(msgspec.json.encode(v).decode() for v in rule["enum"])
                when = f"When `{name}` is {shown}"
    parts: list[str] = []
    for branch, lead in ((then, when), (otherwise, "Otherwise" if when else None)):
        required = branch.get("required") if isinstance(branch, Mapping) else None
        if lead is not None and isinstance(required, list) and required:
            parts.append(
                f"{lead}, {_listed([str(r) for r in required])} {'is' if len(required) == 1 else 'are'} required."
            )
    return (
        " ".join(parts)
        if parts
        else "Some arguments are required depending on others (if/then/else in the schema)."
    )


def shape_notes(union: Union, definitions: Mapping[str, TypeNode]) -> list[str]:
    """The either-or of a union of object shapes merged into one object: which names each requires."""
    objects = [definitions.get(o.name) if isinstance(o, Ref) else o for o in union.options]
    shapes = [o for o in objects if isinstance(o, Object)]
    if len(shapes) < 2:
        return []
    common = set.intersection(*(set(o.required) for o in shapes))
    sets = [[r for r in o.required if r not in common] for o in shapes]
    if not all(sets):
        return []
    return [f"Requires {' or '.join(_listed(names) for names in sets)}."]
