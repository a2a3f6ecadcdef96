"""The public surface: the contract of docs/ARCHITECTURE.md section 3, plus what was added on purpose."""

from __future__ import annotations

import typing

import runtime

CONTRACT = {
    # authoring
    "tool", "ToolBase", "Tool", "SimpleTool", "ToolSet", "Description", "CallContext",
    "ToolRejected", "validate", "fail",
    # contract (schema)
    "ToolDescriptor", "ToolParameter",
    # registry
    "ToolRegistry",
    # wire
    "ToolCall", "ToolResult", "ToolSuccess", "ToolFailure", "FailureKind", "ToolCallMetadata",
    # engine
    "open_runtime", "Runtime", "RestartPolicy", "Feature",
    "TERMINATE_TOOL",
}  # fmt: skip

ADDED_ON_PURPOSE = {
    # multimodal result parts (ToolBase.result_to_parts)
    "ContentPart", "TextPart", "ImagePart", "AudioPart", "ResourcePart", "ResourceLinkPart",
    # a caller hears a tool's ctx.report_progress / ctx.log (DESIGN.md 3.5)
    "reporting",
    # the exception hierarchy of runtime.exceptions
    "ToolRuntimeError", "InvalidArguments", "SchemaError", "ToolDefinitionError", "RuntimeClosed",
    "ToolUnavailable", "ToolOverloaded",
    # tools that ask back (DESIGN.md 3.5): questions, answers, handlers' scope, the failure
    "asking", "Elicitation", "Answer", "Elicited", "Sampling", "SamplingMessage", "Sampled",
    "Root", "RootsRequest", "CannotAsk",
    # an existing object's methods as tools, the object untouched (DESIGN.md 3.1, issue 25)
    "tools_of",
    # call policies (DESIGN.md 3.11): interceptors, the call as they see it; the settings as one value
    "Policy", "CallRequest", "RuntimeOptions",
    # resilience (DESIGN.md 3.11, issue 23): what a tool or a runtime asks of its policies
    "Retry", "Cache", "Dedupe", "RateLimit", "Budget", "CircuitBreaker",
    # large results kept whole (DESIGN.md 3.12, issue 24): the runtime's option, and what a read of
    # a handle that is not the caller's (or expired) raises (REJECTED, its reason for the model)
    "Artifacts", "ArtifactMissing",
    # calls that outlive a request and a process (DESIGN.md 3.14, issue 43): the pending result,
    # the handle, its status and state, the runtime's option, what a tool raises to defer, and
    # what a bad id or a verb the state does not allow raises
    "ToolPending", "DetachedCall", "DetachedStatus", "DetachedState", "Durable", "CallDeferred",
    "CallNotFound", "CallStateError",
}  # fmt: skip


def test_the_package_exports_exactly_the_contract_and_the_deliberate_additions() -> None:
    assert sorted(runtime.__all__) == sorted(CONTRACT | ADDED_ON_PURPOSE)


def test_every_exported_name_exists_and_is_reexported_from_a_private_or_sub_module() -> None:
    for name in runtime.__all__:
        value = getattr(runtime, name)
        assert value is not None
        if typing.get_origin(value) is typing.Union:  # an alias such as ToolResult: its members are ours
            members = [typing.get_origin(m) or m for m in typing.get_args(value)]
            assert all(m.__module__.startswith("runtime.") for m in members), (name, members)
        elif isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
            assert value.__module__.startswith("runtime."), (name, value.__module__)


SCHEMA = {
    # the IR
    "ToolDescriptor", "ToolParameter", "TypeNode",
    "AnyValue", "Array", "Boolean", "Enum", "Integer", "Null", "Number", "Object", "Ref", "String", "Union",
    # into the IR: a Python type, a JSON Schema, a docstring
    "descriptor_from_type", "type_node", "descriptor_from_json_schema", "parse_json_schema",
    "parse_docstring", "Docstring",
    # out of it: one provider's tool definition
    "render_tool", "DIALECTS", "strict_fallback_reason",
}  # fmt: skip


def test_the_schema_package_exports_what_users_need_and_nothing_else() -> None:
    import runtime.schema

    assert sorted(runtime.schema.__all__) == sorted(SCHEMA)
    public = {n for n in vars(runtime.schema) if not n.startswith("_")}
    assert public - {"lowlevel"} == SCHEMA  # lowlevel: the layer's internal port, documented as such
    assert runtime.schema.ToolDescriptor is runtime.ToolDescriptor


def test_the_contract_submodules_import() -> None:
    from runtime.embed import AsyncioRuntime, RuntimeThread, open_asyncio_runtime
    from runtime.providers import anthropic, gemini, openai
    from runtime.tracing import Tracing

    assert {RuntimeThread.__module__, AsyncioRuntime.__module__, open_asyncio_runtime.__module__} == {
        "runtime.embed._thread",
        "runtime.embed._asyncio",
    }
    assert Tracing.__name__ == "Tracing"
    assert all(
        callable(m.__dict__.get(f))
        for m, f in (
            (openai, "calls_from_message"),
            (anthropic, "calls_from_content"),
            (gemini, "calls_from_parts"),
        )
    )


def test_every_package_declares_what_it_exports_and_holds_it() -> None:
    """Each package of runtime/ has `__all__` (what it does not export is private), and each name
    in it is there."""
    import importlib
    import pathlib

    root = pathlib.Path(runtime.__file__).parent
    for init in sorted(root.rglob("__init__.py")):
        name = ".".join(init.parent.relative_to(root.parent).parts)
        if name.split(".")[-1].startswith("_"):
            continue
        if name == "runtime.placement.ray" or "integrations" in name or name == "runtime.code":
            continue  # optional extras: their own tests import them
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        assert exported is not None, name
        missing = [n for n in exported if not hasattr(module, n)]
        assert not missing, (name, missing)
