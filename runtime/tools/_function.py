"""`@tool`: an ordinary function or method becomes a tool.

The signature becomes a msgspec Struct once (`defstruct`, strict); the docstring's
description part (all but its Args/Returns/Raises sections) the description; `Annotated[T, Description(...)]`, `msgspec.Meta(description=)` and
the docstring's Args section the parameter descriptions. A parameter annotated
`CallContext` is injected by the runtime and is not a field, so the model cannot set it.

A method becomes a tool of an object three ways, none of which writes into the object:
`tool(obj.method)` (already bound), a `@tool` method read from an instance (one bound tool
per object, kept in a weak table of the declaration), and `tools_of(obj)`. `@tool` keeps
the function's signature for type checkers (`FunctionTool[P, R]`).
"""

from __future__ import annotations

import copy
import functools
import inspect
import types
import typing
import weakref
from collections.abc import Callable, Mapping
from typing import (
    Any,
    Concatenate,
    Generic,
    NamedTuple,
    ParamSpec,
    Protocol,
    Self,
    TypeVar,
    Unpack,
    cast,
    overload,
)

import msgspec

from ..exceptions import ToolDefinitionError
from ..schema import Docstring, parse_docstring
from ..schema.lowlevel import descriptor_from_fields, field_default, normalize, omitted_nulls, shown_default
from ._base import ToolBase, check_streaming, function_code, warn_undocumented
from ._codec import ArgField, ArgsCodec
from ._context import CallContext, check_tool_name
from ._options import ToolOptions, ToolOptionsKw

__all__ = ["FunctionTool", "tool"]

_astuple = msgspec.structs.astuple

P = ParamSpec("P")
R = TypeVar("R")
Q = ParamSpec("Q")
S = TypeVar("S")


class FunctionTool(ToolBase[Any, Any], Generic[P, R], dynamic=True):
    """A tool made from a function by `@tool`; calling it calls the function.

    It keeps the function's signature for type checkers: `FunctionTool[(a: int), str]` is
    called as the function is, and a `@tool` method read from an instance drops `self`.
    """

    takes_context = False

    def __init__(
        self,
        fn: Callable[..., Any] | staticmethod[..., Any] | classmethod[Any, ..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        title: str | None = None,
        annotations: Mapping[str, Any] | None = None,
        options: ToolOptions | None = None,
        encoder: Callable[[Any], Any] | None = None,
        _declared: FunctionTool[..., Any] | None = None,
        **option_values: Unpack[ToolOptionsKw],
    ) -> None:
        if isinstance(fn, str):
            raise ToolDefinitionError(
                f"@tool({fn!r}): a tool's name is a keyword, `@tool(name={fn!r})`; a positional "
                "argument is the function to make a tool of"
            )
        bind: str | None = None
        bound = False
        static = isinstance(fn, staticmethod)
        if isinstance(fn, staticmethod):
            fn = fn.__func__
        elif isinstance(fn, classmethod):
            fn, bind = fn.__func__, "class"
        elif isinstance(fn, types.MethodType):  # `tool(obj.method)`: already bound to its object
            bind = "class" if isinstance(fn.__self__, type) else "instance"
            bound = True
        if not callable(fn):
            raise ToolDefinitionError(f"@tool needs a function, not {fn!r}")
        if inspect.isgeneratorfunction(fn):
            raise ToolDefinitionError(
                f"tool {getattr(fn, '__name__', fn)!r} is a generator; a tool that yields its output "
                "as it goes is an `async def` generator (a streaming tool), and any other tool returns "
                "one result"
            )
        streams = inspect.isasyncgenfunction(fn)
        qualname = getattr(fn, "__qualname__", "")
        parts = qualname.split(".")
        if bind is None and not static and len(parts) > 1 and parts[-2] != "<locals>":
            bind = "instance"  # defined in a class body: the first parameter is self
        self.fn: Callable[..., Any] = fn
        self._hints: dict[str, Any] = {}
        self._bind = bind
        self._bound = bound
        self._per_instance: weakref.WeakValueDictionary[int, FunctionTool[..., Any]] | None = None
        self.name = check_tool_name(name or getattr(fn, "__name__", None))
        if options is None or option_values:
            base = msgspec.structs.asdict(options) if options is not None else {}
            options = ToolOptions.build(f"tool {self.name!r}", {**base, **option_values})
        for field in ToolOptions.__struct_fields__:  # the class-attribute view of the options
            setattr(self, field, getattr(options, field))
        self.streams = streams
        self.is_async = streams or inspect.iscoroutinefunction(fn)
        if streams:
            check_streaming(self.name, options)
        if options.loop != "trio" and not self.is_async:
            raise ToolDefinitionError(
                f"tool {self.name!r}: loop={options.loop!r} says which event loop an `async def` "
                "tool runs on; this function is not async (a sync tool runs in a worker thread anyway)"
            )

        doc = parse_docstring(fn.__doc__)
        if _declared is not None:  # an override of a @tool method: the declaration fills the gaps
            base_doc = parse_docstring(_declared.fn.__doc__)
            doc = Docstring(
                doc.summary or base_doc.summary,
                {**base_doc.params, **doc.params},
                doc.description or base_doc.description,
            )
            hints = {**_declared._hints, **self._resolve_hints(fn)}
        else:
            hints = self._resolve_hints(fn)
        self._hints = hints
        self.description = description if description is not None else doc.description
        if description is None and not self.description:
            code = getattr(fn, "__code__", None)
            warn_undocumented(self.name, code, getattr(fn, "__module__", "") or "", qualname or repr(fn))
        codec = self._plan(fn, hints)
        self.args_type = codec.struct_type  # the Struct made from the signature
        fields = [
            (f.name, f.type, f.default if f.default_factory is None else _shown(f)) for f in self._fields
        ]
        self.descriptor = descriptor_from_fields(
            fields,
            name=self.name,
            description=self.description,
            param_descriptions=doc.params,
            output=str if streams else hints.get("return"),  # a stream's result: its chunks joined
        )
        codec.nulls = omitted_nulls(self.descriptor)  # strict mode's nulls below the top level
        if title is not None or annotations is not None:
            self.descriptor = msgspec.structs.replace(
                self.descriptor,
                title=title,
                annotations=dict(annotations) if annotations is not None else None,
            )
        self.result_type = str if streams else hints.get("return")
        if encoder is not None and not callable(encoder):
            raise ToolDefinitionError(f"tool {self.name!r}: encoder must be a function (obj) -> JSON value")
        self.encoder = encoder if encoder is not None else getattr(_declared, "encoder", None)

    # -- building --------------------------------------------------------------------

    def _resolve_hints(self, fn: Callable[..., Any]) -> dict[str, Any]:
        try:
            return _quick_hints(fn) or typing.get_type_hints(fn, include_extras=True)
        except Exception as exc:
            raise ToolDefinitionError(
                f"tool {self.name!r}: cannot resolve its type annotations ({exc}); "
                "define the types they name at module level"
            ) from exc

    def _plan(self, fn: Callable[..., Any], hints: dict[str, Any]) -> ArgsCodec:
        params = _parameters(fn.__func__ if isinstance(fn, types.MethodType) else fn)
        if self._bind is not None:
            if not params:
                raise ToolDefinitionError(f"tool {self.name!r} is a method without a self/cls parameter")
            params = params[1:]
        fields: list[ArgField] = []
        positional = 0
        keywords: list[str] = []
        ctx: tuple[str, int | str] | None = None
        for p in params:
            if p.kind in (_VAR_POSITIONAL, _VAR_KEYWORD):
                stars = "*" if p.kind is _VAR_POSITIONAL else "**"
                raise ToolDefinitionError(
                    f"tool {self.name!r}: {stars}{p.name} cannot be described to a model; name each parameter"
                )
            hint = hints.get(p.name, inspect.Parameter.empty)
            if _is_context(hint):
                ctx = ("kw", p.name) if p.kind is _KEYWORD_ONLY else ("pos", positional)
                continue
            if hint is inspect.Parameter.empty:
                raise ToolDefinitionError(
                    f"tool {self.name!r}: parameter {p.name!r} has no type annotation; "
                    f"annotate it (e.g. `{p.name}: str`) so the model knows what to send"
                )
            where = f"tool {self.name!r}: parameter {p.name!r}"
            default = msgspec.NODEFAULT if p.default is _EMPTY else p.default
            factory = None
            field = field_default(default, where) if type(default).__name__ == "FieldInfo" else None
            if field is not None:  # `x: int = pydantic.Field(..., gt=10)`: required, constrained
                default, factory, metas = field
                if metas:
                    hint = typing.Annotated[(hint, *metas)]
            # Descriptions and constraints from other libraries' metadata become msgspec.Meta,
            # so the decoder enforces what the schema shows.
            hint = normalize(hint, where)
            fields.append(ArgField(p.name, hint, default, factory))
            if p.kind is _KEYWORD_ONLY:
                keywords.append(p.name)
            else:
                positional += 1
        self.takes_context = ctx is not None  # type: ignore[misc]  # per function, not per class
        self._fields = fields
        self._codec = codec = ArgsCodec.for_fields(self.name, fields)
        self._positional = positional
        self._keywords = tuple(keywords)
        self._ctx = ctx
        self._simple = ctx is None and not keywords
        return codec

    # -- calling ---------------------------------------------------------------------

    def dispatch(self, args: Any, ctx: CallContext | None) -> Any:
        values = _astuple(args)
        if self._simple:
            return self.fn(*values)
        n = self._positional
        positional = list(values[:n])
        keywords = dict(zip(self._keywords, values[n:], strict=True))
        if self._ctx is not None:
            where, slot = self._ctx
            if where == "pos":
                positional.insert(int(slot), ctx)
            else:
                keywords[str(slot)] = ctx
        return self.fn(*positional, **keywords)

    def dispatch_code(self) -> types.CodeType | None:
        if type(self).dispatch is not FunctionTool.dispatch:
            return None
        return function_code(self.fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function itself (no runtime, no validation): handy in tests."""
        return cast(R, self.fn(*args, **kwargs))

    # -- methods ---------------------------------------------------------------------

    @property
    def is_unbound_method(self) -> bool:
        """True for a `@tool` method reached through its class rather than an instance."""
        return self._bind == "instance" and not self._bound

    @overload
    def __get__(self, instance: None, owner: type) -> Self: ...
    @overload
    def __get__(
        self: FunctionTool[Concatenate[Any, Q], S], instance: object, owner: type | None = None
    ) -> FunctionTool[Q, S]: ...
    def __get__(self, instance: object | None, owner: type | None = None) -> Any:
        if self._bind is None or self._bound:
            return self
        target: object
        if self._bind == "class":
            target = owner if owner is not None else type(instance)
        elif instance is None:
            return self
        else:
            target = instance
        # One bound tool per object while it is in use (`obj.read is obj.read`), kept here rather
        # than on the object: the object stays as it was (copyable, picklable, no new attribute).
        # The table holds the tools weakly, so it keeps neither a tool nor its object alive.
        table = self._per_instance
        if table is None:
            table = self._per_instance = weakref.WeakValueDictionary()
        found = table.get(id(target))
        if found is not None and getattr(found.fn, "__self__", None) is target:
            return found
        bound = self.bind(target)
        table[id(target)] = bound
        return bound

    def bind(self, target: object) -> FunctionTool[..., Any]:
        """This tool with its function bound to `target` (an instance, or a class for classmethods)."""
        bound = copy.copy(self)
        bound.fn = self.fn.__get__(target)
        bound._bound = True
        bound._per_instance = None
        return bound

    def declared_override(
        self, impl: Callable[..., Any] | staticmethod[..., Any] | classmethod[Any, ..., Any]
    ) -> FunctionTool[..., Any]:
        """A tool for `impl`, an override of this `@tool` method that is not decorated itself."""
        return FunctionTool(
            impl,
            name=self.name,
            description=None if impl.__doc__ else self.description,
            options=self.options,
            title=self.descriptor.title,
            annotations=self.descriptor.annotations,
            _declared=self,
        )


_EMPTY = inspect.Parameter.empty
_KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY
_VAR_POSITIONAL = inspect.Parameter.VAR_POSITIONAL
_VAR_KEYWORD = inspect.Parameter.VAR_KEYWORD


class _Param(NamedTuple):
    name: str
    kind: inspect._ParameterKind
    default: Any


def _parameters(fn: Callable[..., Any]) -> list[_Param]:
    """The parameters of `fn`, read from its code object when it is a plain function.

    `inspect.signature` does the same through Parameter objects it validates one by one: most
    of a tool's build time for a small function (W3). Anything else (wrapped, partial,
    a callable object, a custom `__signature__`) takes `inspect.signature`.
    """
    code = getattr(fn, "__code__", None)
    if (
        type(fn) is not types.FunctionType
        or code is None
        or hasattr(fn, "__wrapped__")
        or hasattr(fn, "__signature__")
    ):
        return [_Param(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]
    positional, keyword_only = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames
    defaults = fn.__defaults__ or ()
    first_default = positional - len(defaults)
    params: list[_Param] = []
    for i in range(positional):
        kind = (
            inspect.Parameter.POSITIONAL_ONLY
            if i < code.co_posonlyargcount
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        params.append(_Param(names[i], kind, defaults[i - first_default] if i >= first_default else _EMPTY))
    at = positional + keyword_only
    if code.co_flags & inspect.CO_VARARGS:
        params.append(_Param(names[at], _VAR_POSITIONAL, _EMPTY))
        at += 1
    kwdefaults = fn.__kwdefaults__ or {}
    for name in names[positional : positional + keyword_only]:
        params.append(_Param(name, _KEYWORD_ONLY, kwdefaults.get(name, _EMPTY)))
    if code.co_flags & inspect.CO_VARKEYWORDS:
        params.append(_Param(names[at], _VAR_KEYWORD, _EMPTY))
    return params


@functools.lru_cache(maxsize=4096)
def _compiled(annotation: str) -> types.CodeType:
    return compile(annotation, "<annotation>", "eval")


def _quick_hints(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """The function's annotations evaluated, or None where `typing.get_type_hints` is needed.

    Under `from __future__ import annotations` every annotation is a string, and
    `get_type_hints` compiles each one anew: most of a tool's build time. The compiled code
    is cached here per string; annotations that still name types by string after that
    (`list["Node"]`) or live on wrapped callables take the general path.
    """
    annotations = getattr(fn, "__annotations__", None)
    module_globals = getattr(fn, "__globals__", None)
    if not isinstance(annotations, dict) or module_globals is None or hasattr(fn, "__wrapped__"):
        return None
    hints: dict[str, Any] = {}
    for name, annotation in annotations.items():
        if isinstance(annotation, str):
            annotation = eval(_compiled(annotation), module_globals)  # as get_type_hints does
            if _unresolved(annotation):
                return None
        if annotation is None:
            annotation = type(None)
        hints[name] = annotation
    return hints


def _unresolved(tp: Any) -> bool:
    """True if `tp` still names a type by string somewhere inside it."""
    if isinstance(tp, str | typing.ForwardRef):
        return True
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return False
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        args = args[:1]
    return any(_unresolved(a) for a in args)


def _shown(field: ArgField) -> Any:
    """A parameter's default as the descriptor shows it (a default_factory's value, made once)."""
    if field.default_factory is None:
        return field.default
    return shown_default(msgspec.NODEFAULT, field.default_factory)


def _is_context(hint: Any) -> bool:
    """`CallContext`, or `CallContext | None` (injected all the same)."""
    if hint is CallContext:
        return True
    args = typing.get_args(hint)
    return bool(args) and CallContext in args and all(a is CallContext or a is type(None) for a in args)


@overload
def tool(fn: staticmethod[P, R], /) -> FunctionTool[P, R]: ...
@overload
def tool(fn: classmethod[Any, P, R], /) -> FunctionTool[Concatenate[Any, P], R]: ...
@overload
def tool(fn: Callable[P, R], /) -> FunctionTool[P, R]: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    title: str | None = None,
    annotations: Mapping[str, Any] | None = None,
    encoder: Callable[[Any], Any] | None = None,
    **options: Unpack[ToolOptionsKw],
) -> _Decorator: ...
def tool(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    title: str | None = None,
    annotations: Mapping[str, Any] | None = None,
    encoder: Callable[[Any], Any] | None = None,
    **options: Unpack[ToolOptionsKw],
) -> Any:
    """Make a tool of a sync or async function or method.

    Args:
        name: the tool's name (default: the function's name).
        description: what the model reads (default: the docstring without its Args,
            Returns and Raises sections).
        timeout: seconds a call may take before it fails with TIMEOUT.
        max_concurrency: calls served at once (default: no limit for async tools; sync
            tools share the runtime's thread limiter).
        mailbox_size: calls that may wait for this tool before callers wait too.
        on_full: "wait" (backpressure) or "reject" (OVERLOADED) when the mailbox is full.
        inline: run a sync function on the trio thread (only for fast, non-blocking code).
        in_caller: an `async def` whose code stops at once when cancelled runs in its trio
            caller's own task (no worker task: lighter when many calls wait); see `ToolOptions`.
        restart_on: exceptions after which the tool's actor is restarted (teardown, setup).
        setup_timeout: unused by function tools (they have no setup); accepted for symmetry.
        placement: where the tool runs (default: in this process); see `runtime.placement`.
        requires_approval: ask (through `on_elicit` / the MCP client) before each call runs, or
            before the calls whose arguments a predicate `(args) -> bool` picks.
        title: a human-readable title (shown by MCP clients).
        annotations: behaviour hints for MCP clients, passed through as given
            (`{"readOnlyHint": True, "openWorldHint": False}`).
        encoder: gives the objects of a result that msgspec cannot encode (a custom class,
            `mpmath.mpf`) their JSON form: `encoder=float`, `encoder=lambda o: o.to_dict()`;
            raise NotImplementedError to leave one to `str()`, which is the default. The
            result is still checked against the declared return type after it.
        strict_result: a result that is not of the declared return type fails the call (ERROR).
            By default the model reads it as it was returned and the developer is told (a
            `ResultTypeWarning` once per shape of mismatch, `ToolSuccess.type_mismatch`, the
            span, `statistics()`).

    Every option of `ToolOptions` is accepted as a keyword (tags, policies, retry, cache...).
    """

    def make(f: Any) -> FunctionTool[..., Any]:
        return FunctionTool(
            f,
            name=name,
            description=description,
            title=title,
            annotations=annotations,
            encoder=encoder,
            **options,
        )

    if fn is not None:
        if isinstance(fn, str):
            raise ToolDefinitionError(
                f"@tool({fn!r}): give the tool's name as a keyword, `@tool(name={fn!r})`; the only "
                "positional argument of @tool is the function itself"
            )
        return make(fn)
    return make


class _Decorator(Protocol):
    """What `@tool(...)` with options returns: it makes a tool of the function it decorates."""

    @overload
    def __call__(self, fn: staticmethod[P, R], /) -> FunctionTool[P, R]: ...
    @overload
    def __call__(self, fn: classmethod[Any, P, R], /) -> FunctionTool[Concatenate[Any, P], R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> FunctionTool[P, R]: ...
