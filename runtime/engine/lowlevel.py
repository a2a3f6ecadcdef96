"""The engine's internal port: what `runtime.embed` builds its runtimes on (as `trio.lowlevel`).

Not for applications: these names follow the engine. An embedding opens the engine
(`open_engine`, which also gives its `Entry`), makes a driver for its callers (the asyncio
driver for a guest run on a host loop; its own bridge for another thread), and puts the one call
surface (`Calls`) on it; views of it are `ScopedRuntime`s on the same driver.
"""

from ._call import HOOK_GRACE as HOOK_GRACE
from ._detached import answered_before as answered_before
from ._entry import STREAM_BUFFER as STREAM_BUFFER
from ._entry import AsyncioDriver as AsyncioDriver
from ._entry import Entry as Entry
from ._entry import collected as collected
from ._journal import question_key as question_key
from ._open import open_engine as open_engine
from ._options import settings_keywords as settings_keywords
from ._options import settings_keywords_method as settings_keywords_method
from ._runtime import Calls as Calls
from ._runtime import CallSettings as CallSettings
from ._runtime import Driver as Driver
from ._runtime import Runtime as Runtime
from ._runtime import ScopedRuntime as ScopedRuntime
from ._runtime import new_invoke_id as new_invoke_id
from ._runtime import one_batch as one_batch
from ._runtime import routing_of as routing_of
from ._scope import Prepare as Prepare
from ._scope import Scope as Scope

__all__ = [
    "HOOK_GRACE",
    "STREAM_BUFFER",
    "AsyncioDriver",
    "CallSettings",
    "Calls",
    "Driver",
    "Entry",
    "Prepare",
    "Runtime",
    "Scope",
    "ScopedRuntime",
    "answered_before",
    "collected",
    "new_invoke_id",
    "one_batch",
    "open_engine",
    "question_key",
    "routing_of",
    "settings_keywords",
    "settings_keywords_method",
]
