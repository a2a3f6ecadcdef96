"""The runtime's settings, declared once: `RuntimeOptions` and the supervisor's `RestartPolicy`.

`open_runtime`, `open_asyncio_runtime` and `RuntimeThread` take the same keywords: the fields
of `RuntimeOptions`, declared once there (`settings_keywords` gives a function that keyword
form, which type checkers read off the struct's own constructor), validated by msgspec
(constraints as `Meta`), so a bad setting fails where the runtime is opened.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, Concatenate, ParamSpec, TypeVar

import msgspec

from ..features import Feature
from ..registry import ToolLike, ToolRegistry
from ..tools import Budget, CircuitBreaker, Retry, check_fields
from ._artifacts import Artifacts
from ._policies import Policy
from ._source import ToolSource

__all__ = ["Durable", "RestartPolicy", "RuntimeOptions", "settings_keywords", "settings_keywords_method"]

Seconds = Annotated[float, msgspec.Meta(ge=0)]
Positive = Annotated[float, msgspec.Meta(gt=0)]
Count = Annotated[int, msgspec.Meta(ge=1)]
Weight = Annotated[float, msgspec.Meta(ge=1e-3, le=1e3)]
"""A principal's share under fair admission: from a thousandth to a thousand times the others'."""


class RestartPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the supervisor restarts a crashed tool actor (OTP restart intensity).

    The same window counts the deaths of a placed tool's workers and replicas. A tool that is
    down rests for `cool_down` seconds, then is tried once more (half-open, as a circuit
    breaker: one new incarnation, its setup or its workers' start): if that starts, it serves
    again with a fresh window; if not, it is down again and the next cool-down is twice as long.

    Attributes:
        max_restarts: restarts allowed within `within` seconds; one more marks the tool down.
        within: the intensity period, in seconds.
        backoff: seconds before the first restart; doubles for each recent restart.
        max_backoff: the longest wait between restarts.
        cool_down: seconds a down tool rests before it is tried again; None: down until the
            runtime is opened again.
        max_cool_down: the longest cool-down (it doubles each time a try fails, or the tool goes
            down again before it answered a call).
    """

    max_restarts: Annotated[int, msgspec.Meta(ge=0)] = 3
    within: Positive = 5.0
    backoff: Seconds = 0.1
    max_backoff: Seconds = 5.0
    cool_down: Positive | None = 30.0
    max_cool_down: Positive = 600.0

    def __post_init__(self) -> None:
        check_fields(self)  # its constraints, when it is made in code too (not only decoded)

    def delay(self, recent: int) -> float:
        """The wait before a restart when `recent` restarts happened within the period."""
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, recent - 1)))

    def rest(self, failed: int) -> float | None:
        """The cool-down of a tool that went down `failed` times in a row (1: the first time)."""
        if self.cool_down is None:
            return None
        return float(min(self.max_cool_down, self.cool_down * 2 ** max(0, failed - 1)))


class Durable(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How detached and deferred calls are kept (`open_runtime(durable=...)`), in the runtime's
    store: a `MemoryStore` keeps them in this process; `SQLiteStore` across a restart; `RedisStore`
    across every process that shares it.

    Attributes:
        ttl: seconds a finished call's entry (its result) is kept; then it is forgotten.
        expires: seconds a pending call (an approval, an outside result) waits before it
            expires (TIMEOUT, it never runs); None: it waits until decided.
        max_per_principal: detached and pending calls one principal may have at once (one
            tenant cannot fill the journal); beyond it `detach` raises ToolOverloaded and a
            deferral is the call's OVERLOADED.
        lease: seconds after which a process that stopped renewing its lease (it was killed) is
            taken for gone: its calls are recovered by another process (or its restart).
        poll_interval: seconds between looks at the store for what another process changed (a
            cancel, an answer, an end); this process's own changes are seen at once.
        node: a stable name for this process, unique among the live ones (a pod's name): a
            restart of the same node recovers the calls its last run left at once, without
            waiting out the lease. None: a new name each run.
    """

    ttl: Positive = 3600.0
    expires: Positive | None = 86400.0
    max_per_principal: Count = 1000
    lease: Positive = 15.0
    poll_interval: Positive = 1.0
    node: str | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        if self.node is not None and not _NODE.fullmatch(self.node):
            raise ValueError(f"node must be 1-64 letters, digits, '.', '_' or '-', not {self.node!r}")


_NODE = re.compile(r"[A-Za-z0-9._-]{1,64}")


class RuntimeOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything `open_runtime` can be told, with its default.

    Attributes:
        features: call hooks, in order.
        tracing: True for OpenTelemetry spans and metrics through the global providers,
            False for none, or a configured `runtime.tracing.Tracing`.
        default_timeout: seconds a call may run when neither its tool nor its caller says.
        restart: how crashed actors are restarted.
        mcp_servers: tool sources (`runtime.mcp.stdio(...)` ...); opening waits for their first listing.
        max_argument_bytes: larger arguments are INVALID_ARGUMENTS before decoding.
        max_argument_depth: arguments nested deeper are INVALID_ARGUMENTS before decoding.
        max_result_chars: longer texts going back (content, text parts, failures) are cut, with a marker.
        thread_limit: worker threads of each sync tool that sets no `max_concurrency` (each
            sync tool has its own budget, so one tool's stuck threads never starve another).
        shutdown_timeout: seconds running calls get to finish at shutdown before they are
            cancelled; work that ignores cancellation is abandoned half a second later.
        on_elicit: answers the tools' `ctx.elicit` and `requires_approval` questions
            (`async def on_elicit(q: Elicitation) -> Answer`), and MCP servers' elicitation
            requests to this runtime's connections. Without it a tool that asks fails UNAVAILABLE.
        on_sample: answers `ctx.sample` and MCP servers' sampling requests
            (`async def on_sample(r: Sampling) -> Sampled`), e.g. with the agent's own model.
        on_roots: answers `ctx.list_roots` and MCP servers' roots requests
            (`async def on_roots(r: RootsRequest) -> list[Root]`).
        policies: interceptors (`runtime.Policy`) around every call of the tools they apply to,
            outermost first; a tool's own (`@tool(policies=...)`) run inside these.
        long_call_warning: seconds after which a call with no deadline that still runs is
            logged (a warning, once per call, naming the tool and `timeout=`); None: never.
        store: where the resilience policies keep what outlives a call (`runtime.stores`:
            `MemoryStore()` by default; `SQLiteStore(path)` to survive a restart; `RedisStore(url)`
            to share budgets, rate limits, breakers and dedupe between processes). A store that
            fails is degraded to memory (logged, counted), never a call's failure.
        retry: the default `Retry` of every idempotent tool that sets none.
        breaker: the default `CircuitBreaker` of every tool (an MCP server's tools share one).
        budget: caps per batch and per principal (`Budget`).
        fair: a tool's waiting calls are served fairly across principals (deficit round robin),
            so one principal's burst cannot starve another's calls.
        weights: principals' shares under `fair` (default 1.0 each; from 0.001 to 1000).
        stop_idle_after: seconds after which the actor of a tool that started on its first call
            (one with no `setup()`, in this process) and has had no call since is stopped; it
            starts again on the next call, its counters kept. None: such actors run until the
            runtime closes.
        artifacts: keep results over their limit whole instead of cutting them (`Artifacts`;
            True: the defaults, in memory): the model reads a handle, the size, the start and
            the end, and how to read more. None (the default): they are cut.
        durable: how detached and deferred calls are kept in `store` (`Durable`: results' ttl,
            pending calls' expiry, per-principal bounds, the lease of a process).
    """

    features: Sequence[Feature] = ()
    tracing: Any = True  # True, False or a Feature (msgspec has no union of bool and a class)
    default_timeout: Positive | None = None
    restart: RestartPolicy = msgspec.field(default_factory=RestartPolicy)
    mcp_servers: Sequence[ToolSource] = ()
    max_argument_bytes: Count = 1 << 20
    max_argument_depth: Count = 64
    max_result_chars: Count = 100_000
    thread_limit: Count = 40
    shutdown_timeout: Seconds = 5.0
    on_elicit: Any = None
    on_sample: Any = None
    on_roots: Any = None
    policies: Sequence[Policy] = ()
    long_call_warning: Positive | None = 60.0
    store: Any = None
    retry: Retry | None = None
    breaker: CircuitBreaker | None = None
    budget: Budget | None = None
    fair: bool = False
    weights: dict[str, Weight] = msgspec.field(default_factory=dict)
    stop_idle_after: Positive | None = 300.0
    artifacts: Artifacts | bool | None = None  # True: Artifacts() (the defaults, in memory)
    durable: Durable = msgspec.field(default_factory=Durable)

    def __post_init__(self) -> None:
        if not isinstance(self.tracing, bool | Feature):
            raise ValueError(f"tracing must be True, False or a Tracing instance, not {self.tracing!r}")
        for name in ("on_elicit", "on_sample", "on_roots"):
            handler = getattr(self, name)
            if handler is not None and not callable(handler):
                raise ValueError(f"{name} must be an async function or None, not {handler!r}")
        if self.store is not None and not all(
            callable(getattr(self.store, op, None)) for op in ("get", "set", "add", "incr", "take")
        ):
            raise ValueError(f"store must be a runtime.stores store (MemoryStore, ...), not {self.store!r}")

    @classmethod
    def build(cls, base: RuntimeOptions | None = None, **values: Any) -> RuntimeOptions:
        """`base` (default: the defaults) with `values` replacing its fields, validated.

        Raises:
            TypeError: an unknown keyword, or a value of the wrong type or out of range (the
                message names the setting).
        """
        if base is not None:
            values = {**{f: getattr(base, f) for f in cls.__struct_fields__}, **values}
        if "artifacts" in values and isinstance(values["artifacts"], bool):
            values["artifacts"] = Artifacts() if values["artifacts"] else None
        for name in ("features", "mcp_servers", "policies"):
            if name in values and not isinstance(values[name], tuple):
                if not isinstance(values[name], Iterable):
                    raise TypeError(f"{name} must be a sequence, not {values[name]!r}")
                values[name] = tuple(values[name])
        try:
            return msgspec.convert(values, cls, dec_hook=_objects)
        except msgspec.ValidationError as exc:
            raise TypeError(f"open_runtime: {_sentence(exc)}") from None


def _objects(kind: Any, value: Any) -> Any:
    if isinstance(kind, type) and isinstance(value, kind):  # a Feature, a RestartPolicy
        return value
    raise TypeError(f"Expected `{getattr(kind, '__name__', kind)}`")


def _sentence(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    if text.startswith("Object contains unknown field"):
        return f"unknown keyword {text.rpartition(' ')[2]}"
    return text


P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
Registry = ToolRegistry | Iterable[ToolLike]


def settings_keywords(
    options: Callable[P, RuntimeOptions],
) -> Callable[[Callable[[Registry, RuntimeOptions], R]], Callable[Concatenate[Registry, P], R]]:
    """Give `fn(registry, options)` the keyword form of `options`' fields (its type checkers
    read them off `RuntimeOptions`, declared once), validated (`RuntimeOptions.build`)."""

    def decorate(fn: Callable[[Registry, RuntimeOptions], R]) -> Callable[Concatenate[Registry, P], R]:
        @functools.wraps(fn)
        def with_settings(registry: Registry = (), /, *args: P.args, **settings: P.kwargs) -> R:
            values: dict[str, Any] = dict(settings)
            return fn(registry, RuntimeOptions.build(None, **values))

        with_settings.__signature__ = _signature(fn)  # type: ignore[attr-defined]
        return with_settings

    return decorate


def settings_keywords_method(
    options: Callable[P, RuntimeOptions],
) -> Callable[[Callable[[S, Registry, RuntimeOptions], None]], Callable[Concatenate[S, Registry, P], None]]:
    """`settings_keywords` for an `__init__(self, registry, options)`."""

    def decorate(
        fn: Callable[[S, Registry, RuntimeOptions], None],
    ) -> Callable[Concatenate[S, Registry, P], None]:
        @functools.wraps(fn)
        def with_settings(self: S, registry: Registry = (), /, *args: P.args, **settings: P.kwargs) -> None:
            values: dict[str, Any] = dict(settings)
            fn(self, registry, RuntimeOptions.build(None, **values))

        with_settings.__signature__ = _signature(fn, method=True)  # type: ignore[attr-defined]
        return with_settings

    return decorate


def _signature(fn: Callable[..., Any], method: bool = False) -> inspect.Signature:
    """`fn(registry=(), /, *, <every RuntimeOptions field with its default>)`, for help() and IDEs."""
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("registry", inspect.Parameter.POSITIONAL_ONLY, default=())]
    if method:
        params.insert(0, inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY))
    defaults = RuntimeOptions()
    for name in RuntimeOptions.__struct_fields__:
        params.append(inspect.Parameter(name, kw, default=getattr(defaults, name)))
    return inspect.Signature(params, return_annotation=inspect.signature(fn).return_annotation)
