"""Code mode (the `code` extra): the model writes a short program that calls the tools.

```python
from runtime.code import code_mode

run_code = code_mode(timeout=30.0, max_calls=50)      # the tool `run_code(code: str)`
async with open_runtime([search, fetch, run_code]) as rt:
    ...
```

A program runs in a sandbox (pydantic-monty: a Python subset in worker processes); every tool of
the view its call came through is an `async` function in it, called with keyword arguments, and
every call it makes goes through the runtime like any call (principal, view, policies, budgets,
deadline, spans). See docs/how-to/code-mode.md.
"""

from typing import Unpack

try:
    import pydantic_monty as _monty  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is installed where it is tested
    raise ImportError(
        "runtime.code runs programs in pydantic-monty's sandbox: install the `code` extra "
        "(`pip install '.[code]'` in a checkout), or `pip install 'pydantic-monty==1.4.0'`"
    ) from exc

from ._limits import CodeLimits as CodeLimits
from ._limits import CodeLimitsKw as CodeLimitsKw
from ._program import PENDING_RAISES as PENDING_RAISES
from ._program import RAISED as RAISED
from ._program import ProgramResult as ProgramResult
from ._tool import CodeArgs as CodeArgs
from ._tool import CodeStatistics as CodeStatistics
from ._tool import CodeTool as CodeTool

__all__ = [
    "PENDING_RAISES",
    "RAISED",
    "CodeArgs",
    "CodeLimits",
    "CodeLimitsKw",
    "CodeStatistics",
    "CodeTool",
    "ProgramResult",
    "code_mode",
]


def code_mode(
    *, name: str = "run_code", description: str | None = None, **limits: Unpack[CodeLimitsKw]
) -> CodeTool:
    """The code tool: `run_code(code: str)` runs a program whose tools are the caller's view's.

    Args:
        name: the tool's name.
        description: what the model reads before the stubs (None: how to write a program).
        **limits: `CodeLimits` (timeout, max_memory, max_recursion, max_suspensions, max_calls,
            max_output, workers, clock); each has a default: none is unlimited.

    Raises:
        ValueError: a limit that is unknown or out of range.
    """
    return CodeTool(CodeLimits.build(**limits), name=name, description=description)
