"""Class tools: `ToolBase` (the one dispatch entry), `Tool` and `SimpleTool` on top of it.

Koog's three-level design: `ToolBase.execute(args, ctx)` is what the engine calls;
`Tool.execute(args)` drops the context for the 99% case; `SimpleTool` returns the text the
model reads. The args type is read from the class's generic parameters when the class is
defined, and the codec and descriptor are built once, there.
"""

from __future__ import annotations

import dataclasses
import dis
import inspect
import re
import sys
import types
import typing
import warnings
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import msgspec

from ..exceptions import ResultTypeError, ToolDefinitionError, ToolDefinitionWarning
from ..messages import ContentPart, TextPart
from ..schema import ToolDescriptor, parse_docstring
from ..schema.lowlevel import (
    attribute_docs,
    descriptor_from_fields,
    descriptor_from_type,
    is_model,
    normalize,
    omitted_nulls,
    shown_default,
)
from ..schema.lowlevel import own_doc as written_doc
from ._codec import ArgField, ArgsCodec, ModelArgsCodec, accepts_none
from ._context import CallContext, check_tool_name
from ._options import Loop, OnFull, ToolOptions
from ._results import ResultCodec, default_enc_hook, encode_value

__all__ = [
    "ArgsT",
    "ResultT",
    "SimpleTool",
    "Tool",
    "ToolBase",
    "cannot_suspend",
    "check_streaming",
    "describe",
    "result_encoder",
    "run_to_end",
    "warn_undocumented",
]

ArgsT = TypeVar("ArgsT")
ResultT = TypeVar("ResultT")


result_encoder = msgspec.json.Encoder(enc_hook=default_enc_hook)
"""JSON for what msgspec encodes, and pydantic models (by their `model_dump`)."""


class ToolBase(Generic[ArgsT, ResultT]):
    """A tool: a name, a descriptor for the model, and `execute(args, ctx)`.

    Subclass `Tool` or `SimpleTool` unless the tool needs its CallContext. Class attributes
    configure it: `name`, `description`, and the options of `@tool` (`timeout`,
    `max_concurrency`, `mailbox_size`, `on_full`, `inline`, `restart_on`, `setup_timeout`,
    `placement`, `loop`; see `ToolOptions`), read once when the class is defined. `execute` may be
    sync (run in a worker thread) or async. Override the codec hooks to change how
    arguments are read and results are shown to the model.

    Attributes:
        options: the validated options the engine reads (from the attributes, once per actor).
        descriptor: what the model is told (built from the args type once per class).
        args_type: the type the arguments decode into.
        result_type: the declared result type, when known.
    """

    name: str
    description: str = ""
    timeout: float | None = None
    max_concurrency: int | None = None
    mailbox_size: int = 1024
    on_full: OnFull = "wait"
    inline: bool = False
    restart_on: tuple[type[BaseException], ...] = ()
    setup_timeout: float | None = 30.0
    placement: Any = None
    loop: Loop = "trio"
    requires_approval: Any = False
    task: Any = False
    task_from: Any = "start"
    strict_result: bool = False
    encoder: Callable[[Any], Any] | None = None
    """Gives a result's objects that msgspec cannot encode a JSON form (a function, or a method:
    `def encoder(self, obj)`); raise NotImplementedError to leave an object to `str()`."""

    tool_type: ClassVar[str] = "function"
    """`gen_ai.tool.type`: "function" for local tools, "extension" for MCP tools."""
    takes_context: ClassVar[bool] = True
    """Whether `dispatch` needs a CallContext (the engine skips building one otherwise)."""
    in_caller: bool = False
    """Its code stops at once when cancelled (an MCP server's tool, which only awaits the server;
    any `async def` tool that says so): a trio caller's `rt.call` may run one in the caller's own
    task, with no hop (the `in_caller` option)."""

    descriptor: ToolDescriptor
    args_type: Any = None
    result_type: Any = None
    is_async: bool = True
    streams: bool = False
    """`execute` is an `async def` generator: a streaming tool, whose result is its chunks joined
    (`Runtime.stream` hands them out as they come)."""
    _codec: ArgsCodec | ModelArgsCodec | None = None

    def __init_subclass__(cls, *, dynamic: bool = False, **kwargs: Any) -> None:
        """Build the codec and descriptor of a concrete tool class once.

        Args:
            dynamic: the class builds its descriptor per instance (function and MCP tools).
        """
        super().__init_subclass__(**kwargs)
        if "execute" in cls.__dict__:
            execute = cls.__dict__["execute"]
            cls.streams = inspect.isasyncgenfunction(execute)
            cls.is_async = cls.streams or inspect.iscoroutinefunction(execute)
        found = None if dynamic else _generic_args(cls)
        if found is None:
            return  # a generic intermediate class; its concrete subclasses are built
        args_type, result_type = found
        options = ToolOptions.build(f"tool class {cls.__qualname__}", cls)  # a bad option fails here
        if cls.streams:
            check_streaming(f"class {cls.__qualname__}", options)
        if options.loop != "trio" and not cls.is_async:
            raise ToolDefinitionError(
                f"tool class {cls.__qualname__}: loop={options.loop!r} says which event loop "
                "`async def execute` runs on; this execute is not async (a sync tool runs in a "
                "worker thread anyway)"
            )
        name = cls.__dict__.get("name") or getattr(cls, "name", None) or _snake(cls.__name__)
        cls.name = check_tool_name(name)
        own_doc = parse_docstring(cls.__dict__.get("__doc__"))
        # a dataclass's generated `__doc__` ("Args(text: str)") says nothing to a model
        args_doc = parse_docstring(getattr(args_type, "__doc__", None) if written_doc(args_type) else None)
        description = cls.__dict__.get("description") or own_doc.description or cls.description
        codec, fields = _codec_for(args_type, cls.name)
        cls.args_type = args_type
        cls.result_type = result_type
        cls._codec = codec
        cls.descriptor = describe(
            fields,
            name=cls.name,
            description=description or args_doc.description,
            param_docs={**args_doc.params, **own_doc.params},
            args_type=args_type,
            result_type=result_type,
        )
        codec.nulls = omitted_nulls(cls.descriptor)  # strict mode's nulls below the top level
        if not cls.descriptor.description:
            execute = cls.__dict__.get("execute")
            warn_undocumented(cls.name, getattr(execute, "__code__", None), cls.__module__, cls.__qualname__)

    @property
    def options(self) -> ToolOptions:
        """The tool's options as one validated value (read from its attributes)."""
        return ToolOptions.build(f"tool {getattr(self, 'name', '?')!r}", self)

    if TYPE_CHECKING:
        # Subclasses choose the signature (`Tool.execute(args)`, `ToolBase.execute(args, ctx)`),
        # so type checkers see a callable that any of them overrides.
        execute: Callable[..., Awaitable[ResultT]]
        """Do the work: `async def execute(self, args, ctx)`. The engine calls it through
        `dispatch`, never the model directly."""
    else:

        async def execute(self, args, ctx):
            """Do the work. The engine calls this through `dispatch`, never the model directly."""
            raise NotImplementedError(f"{type(self).__qualname__} must define execute()")

    def dispatch(self, args: ArgsT, ctx: CallContext | None) -> Any:
        """Start `execute`; an awaitable when `is_async`, else the result. Called by the engine."""
        return self.execute(args, ctx)

    def dispatch_code(self) -> types.CodeType | None:
        """The code object every `dispatch` runs: its coroutine's code for an async tool.

        None when that is not one known plain function (`dispatch` overridden, `execute` not a
        plain function). The engine reads it to find async tools that never suspend.
        """
        if type(self).dispatch not in _PLAIN_DISPATCH:
            return None
        return function_code(type(self).execute)

    # -- codec hooks -----------------------------------------------------------------

    def decode_args(self, raw: str | bytes | Mapping[str, Any]) -> ArgsT:
        """JSON text (or a parsed object) -> typed args, in one strict pass.

        Raises:
            InvalidArguments: naming the JSON path of the bad value and what was expected.
        """
        codec = self._codec
        if codec is None:
            raise ToolDefinitionError(f"tool {self.name!r} has no args type; override decode_args()")
        result: ArgsT = codec.decode(raw)
        return result

    def encode_result(self, result: ResultT) -> bytes:
        """The result as JSON bytes; what msgspec cannot encode goes through `encoder`, else `str()`."""
        return encode_value(result, self.encoder)[0]

    def result_to_text(self, result: ResultT) -> str:
        """The text the model reads: a string as it is, anything else as JSON."""
        if isinstance(result, str):
            return result
        return self.encode_result(result).decode()

    def result_to_parts(self, result: ResultT) -> list[ContentPart]:
        """Multimodal content for the model; by default one text part."""
        return [TextPart(text=self.result_to_text(result))]

    def result_value(self, result: ResultT) -> Any:
        """What `ToolSuccess.value` carries; by default the result itself.

        For a tool whose `execute` returns a richer object than its callers should see
        (an MCP tool returns the whole reply; the value is its structured content).
        """
        return result

    @property
    def result_codec(self) -> ResultCodec:
        """How this tool's results are checked against `result_type` and made text (made once)."""
        codec: ResultCodec | None = self.__dict__.get("_result_codec")
        if codec is None:
            declared = None if not self.checks_result else self.result_type
            codec = self.__dict__["_result_codec"] = ResultCodec(
                self.name, declared, self.encoder, strict=bool(getattr(self, "strict_result", False))
            )
        return codec

    checks_result: ClassVar[bool] = True
    """Whether a result is checked against `result_type` (SimpleTool gives any result as its `str()`)."""

    def result_presenter(self) -> Callable[[Any], tuple[str, Any]]:
        """The one function the engine calls with each value a call returned.

        It returns (the text the model reads, what `ToolSuccess.value` carries), or raises
        `ResultTypeError` when the value is not of the declared result type (loose: carrying
        that pair, made from the value as it was returned). Without overridden codec hooks it is
        `result_codec.present`; with them, the check, then the hooks.
        """
        cls = type(self)
        codec = self.result_codec
        own_text = (
            cls.result_to_text is not ToolBase.result_to_text
            or cls.encode_result is not ToolBase.encode_result
        )
        own_value = cls.result_value is not ToolBase.result_value
        if not own_text and not own_value:
            return codec.present
        check = codec.check if codec.checks else None
        to_text = self.result_to_text if own_text else None
        to_value = self.result_value

        def present(value: Any) -> tuple[str, Any]:
            mismatch: ResultTypeError | None = None
            if check is not None:
                try:
                    check(value)
                except ResultTypeError as exc:
                    if exc.returned is None:  # strict: the call fails
                        raise
                    mismatch = exc
            if to_text is not None:
                text, shown = to_text(value), value
            elif mismatch is not None and mismatch.returned is not None:
                text, shown = mismatch.returned
            else:
                text, shown = codec.present(value)
            made = (text, to_value(value) if own_value else shown)
            if mismatch is not None:  # what the hooks made of it, given to the model as it is
                raise ResultTypeError(str(mismatch), returned=made)
            return made

        return present

    # -- lifecycle -------------------------------------------------------------------

    async def setup(self) -> None:
        """Acquire what the tool needs (a connection, a model); run at start and restart."""

    async def teardown(self) -> None:
        """Release what `setup` acquired; run at stop and before a restart."""

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} {getattr(self, 'name', '?')!r}>"


class Tool(ToolBase[ArgsT, ResultT], dynamic=True):
    """A tool whose `execute(args)` does not need the CallContext."""

    takes_context: ClassVar[bool] = False

    async def execute(self, args: ArgsT) -> ResultT:
        """Do the work with the decoded args."""
        raise NotImplementedError(f"{type(self).__qualname__} must define execute()")

    def dispatch(self, args: ArgsT, ctx: CallContext | None) -> Any:
        return self.execute(args)


_PLAIN_DISPATCH = (ToolBase.dispatch, Tool.dispatch)


def check_streaming(name: str, options: ToolOptions) -> None:
    """A streaming tool (an `async def` generator) runs on trio, in this process.

    Raises:
        ToolDefinitionError: it asks for another loop, or a placement in other processes.
    """
    if options.loop == "asyncio":
        raise ToolDefinitionError(
            f"tool {name}: a streaming tool (an async generator) runs on trio; drop loop='asyncio' "
            "(or return one result from an asyncio tool)"
        )
    placement = options.placement
    if placement is not None and not placement.in_process:
        raise ToolDefinitionError(
            f"tool {name}: a streaming tool (an async generator) runs in this process, where its "
            "chunks are handed out as they come; drop the placement (or return one result)"
        )


def cannot_suspend(code: types.CodeType | None) -> bool:
    """True for the code of an `async def` that can never suspend (no `await` in it).

    A coroutine suspends only at a YIELD_VALUE of its own frame (`await`, `async for`,
    `async with` and async comprehensions all compile to one), so code without one runs from
    start to end in a single `send(None)`.
    """
    if code is None or not code.co_flags & inspect.CO_COROUTINE:
        return False
    return not any(instruction.opname == "YIELD_VALUE" for instruction in dis.get_instructions(code))


def run_to_end(coro: Any) -> Any:
    """Run a coroutine that `cannot_suspend` to its end, synchronously; its value or exception."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()  # unreachable for code checked by `cannot_suspend`
    raise RuntimeError(f"{coro!r} suspended where it cannot")


def function_code(fn: object) -> types.CodeType | None:
    """The code object of a plain function or of a method bound to one, else None."""
    if type(fn) is types.MethodType:
        fn = fn.__func__
    return fn.__code__ if type(fn) is types.FunctionType else None


class SimpleTool(Tool[ArgsT, str], dynamic=True):
    """A tool whose result is a string, given to the model verbatim (any other value as its `str()`)."""

    checks_result: ClassVar[bool] = False

    def result_to_text(self, result: str) -> str:
        return result if isinstance(result, str) else str(result)


# -- building --------------------------------------------------------------------------


def describe(
    fields: list[tuple[str, Any, Any]],
    *,
    name: str,
    description: str,
    param_docs: Mapping[str, str] | None = None,
    args_type: Any = None,
    result_type: Any = None,
) -> ToolDescriptor:
    """The descriptor of a class tool whose arguments are `fields` (JSON name, type, default).

    A field's own words (its `Annotated` metadata, then its attribute docstring, then the
    args class's Attributes section) come before `param_docs` (the tool's docstring).
    """
    docs = dict(param_docs or {})
    if is_model(args_type):  # described by its own JSON Schema, field descriptions included
        return descriptor_from_type(
            args_type, name=name, description=description, param_descriptions=docs, output=result_type
        )
    if isinstance(args_type, type):
        docs.update(attribute_docs(args_type))
    return descriptor_from_fields(
        fields, name=name, description=description, param_descriptions=docs, output=result_type
    )


def _generic_args(cls: type) -> tuple[Any, Any] | None:
    for klass in cls.__mro__:
        for base in klass.__dict__.get("__orig_bases__", ()):
            origin = typing.get_origin(base)
            if not (isinstance(origin, type) and issubclass(origin, ToolBase)):
                continue
            params = typing.get_args(base)
            if not params or isinstance(params[0], TypeVar):
                continue
            if issubclass(origin, SimpleTool):
                return params[0], str
            result = params[1] if len(params) > 1 and not isinstance(params[1], TypeVar) else None
            return params[0], result
    return None


Described = list[tuple[str, Any, Any]]


def _codec_for(args_type: Any, tool_name: str) -> tuple[ArgsCodec | ModelArgsCodec, Described]:
    """The codec of an args type, and its fields as the descriptor shows them (JSON name, type, default)."""
    where = f"tool {tool_name!r}"
    if isinstance(args_type, type) and issubclass(args_type, msgspec.Struct):
        infos = msgspec.structs.fields(args_type)
        fields = [
            ArgField(
                f.name,
                normalize(f.type, f"{where}: field {f.name!r}"),
                f.default,
                None if f.default_factory is msgspec.NODEFAULT else f.default_factory,
            )
            for f in infos
        ]
        described = [(i.encode_name, f.type, _shown_default(f)) for i, f in zip(infos, fields, strict=True)]
        config = args_type.__struct_config__
        direct = (
            config.forbid_unknown_fields
            and all(f.required or accepts_none(f.type) for f in fields)
            and all(f.type is i.type for f, i in zip(fields, infos, strict=True))
        )
        if direct:
            return ArgsCodec(args_type), described
        rename = {f.name: f.encode_name for f in infos if f.encode_name != f.name}
        codec = ArgsCodec.for_fields(
            args_type.__name__,
            fields,
            rename=rename,
            build=_kwargs_builder(args_type, [f.name for f in infos]),
        )
        return codec, described
    if is_model(args_type):
        return ModelArgsCodec(args_type), []
    if isinstance(args_type, type) and dataclasses.is_dataclass(args_type):
        hints = _hints(args_type, tool_name)
        fields = []
        for f in dataclasses.fields(args_type):
            if not f.init:
                continue
            factory = f.default_factory if f.default_factory is not dataclasses.MISSING else None
            default = f.default if f.default is not dataclasses.MISSING else msgspec.NODEFAULT
            tp = normalize(hints[f.name], f"{where}: field {f.name!r}")
            fields.append(ArgField(f.name, tp, default, factory))
        codec = ArgsCodec.for_fields(
            args_type.__name__, fields, build=_kwargs_builder(args_type, [f.name for f in fields])
        )
        return codec, [(f.name, f.type, _shown_default(f)) for f in fields]
    if typing.is_typeddict(args_type):
        hints = _hints(args_type, tool_name)
        required = {k for k, t in hints.items() if _required_key(args_type, k, t)}
        fields = [
            ArgField(k, normalize(_strip_required(t), f"{where}: field {k!r}")) for k, t in hints.items()
        ]
        optional = [k for k in hints if k not in required]
        codec = ArgsCodec.for_fields(
            args_type.__name__, fields, unset_optional=optional, build=_typeddict_builder
        )
        return codec, [
            (f.name, f.type, msgspec.UNSET if f.name in optional else msgspec.NODEFAULT) for f in fields
        ]
    raise ToolDefinitionError(
        f"tool {tool_name!r}: its args type must be an object (a msgspec Struct, a dataclass, a "
        f"TypedDict or a pydantic model), not {args_type!r}; wrap a single value in one, e.g. "
        "`class Args(msgspec.Struct): value: int`"
    )


def _shown_default(field: ArgField) -> Any:
    """What the descriptor says of a field's default: NODEFAULT (required), UNSET (unknown) or the value."""
    if field.default_factory is not None:
        return shown_default(msgspec.NODEFAULT, field.default_factory)  # what an omitted field gets
    return field.default


def _kwargs_builder(target: Any, names: list[str]) -> Any:
    getters = tuple(names)

    def build(value: Any) -> Any:
        return target(**{n: getattr(value, n) for n in getters})

    return build


def _typeddict_builder(value: Any) -> dict[str, Any]:
    return {k: v for k, v in msgspec.structs.asdict(value).items() if v is not msgspec.UNSET}


def _required_key(typed_dict: Any, key: str, hint: Any) -> bool:
    """Whether a TypedDict key is required, from its resolved hint first.

    Under `from __future__ import annotations` Python 3.11 cannot see `NotRequired[...]` in
    the string annotation when it makes the class, so `__required_keys__` lists every key.
    """
    origin = typing.get_origin(hint)
    if origin is typing.NotRequired:
        return False
    if origin is typing.Required:
        return True
    return key in typed_dict.__required_keys__


def _strip_required(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.NotRequired or origin is typing.Required:
        return typing.get_args(tp)[0]
    return tp


def _hints(obj: Any, tool_name: str) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot resolve the type annotations of {obj!r} ({exc}); "
            "define the types it names at module level"
        ) from exc


_TOLD: set[tuple[str, int, str]] = set()  # (file, line, tool) told of a missing description


def warn_undocumented(name: str, code: types.CodeType | None, module: str, where: str) -> None:
    """Warn once (per definition) that the tool `name` has no description: the model would be
    told nothing of what it does. The warning points at the definition (`code`), where there is one."""
    if code is not None:
        filename, line = code.co_filename, code.co_firstlineno
    else:
        filename, line = getattr(sys.modules.get(module), "__file__", None) or module, 0
    key = (filename, line, name)
    if key in _TOLD:
        return
    warnings.warn_explicit(
        ToolDefinitionWarning(
            f"tool {name!r} ({where}) has no description: the model will be told nothing of what it "
            "does; give it a docstring (or description=)"
        ),
        ToolDefinitionWarning,
        filename,
        line,
        module=module,
    )
    _TOLD.add(key)


_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()
