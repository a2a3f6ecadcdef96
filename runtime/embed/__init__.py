"""Embedding the runtime in programs that are not trio: asyncio servers, sync code, threads.

- `open_asyncio_runtime(registry)`: the runtime on the running asyncio (or uvloop) loop, as a
  trio guest, for asyncio servers (a FastAPI / Starlette lifespan). No second thread; tools
  declared `@tool(loop="asyncio")` run on that loop.
- `RuntimeThread(registry)`: the runtime on a thread of its own, for sync code and for
  callers in several threads (`.call`, `.call_many`, and `await .acall` from asyncio).

docs/ARCHITECTURE.md compares the two; the README has the measured costs.
"""

from ._asyncio import AsyncioRuntime as AsyncioRuntime
from ._asyncio import AsyncioScopedRuntime as AsyncioScopedRuntime
from ._asyncio import open_asyncio_runtime as open_asyncio_runtime
from ._thread import BlockingDetachedCall as BlockingDetachedCall
from ._thread import RuntimeThread as RuntimeThread
from ._thread import ThreadScopedRuntime as ThreadScopedRuntime

__all__ = [
    "AsyncioRuntime",
    "AsyncioScopedRuntime",
    "BlockingDetachedCall",
    "RuntimeThread",
    "ThreadScopedRuntime",
    "open_asyncio_runtime",
]
