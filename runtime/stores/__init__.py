"""State the resilience policies keep beyond one call: `MemoryStore` (this process, the
default), `SQLiteStore` (a file: survives a restart, shared by processes on one machine) and
`RedisStore` (shared by every server process that reaches the Redis), behind one `Store`
protocol; `DegradingStore` keeps the runtime going on memory while its store is down.
`ArtifactStore` keeps large results whole in any of them (or in a `FolderStore`, files).
"""

from ._artifacts import ArtifactInfo, ArtifactMatch, ArtifactStore
from ._degrading import DegradingStore
from ._folder import FolderStore
from ._memory import MemoryStore
from ._protocol import Store, StoreError
from ._redis import RedisStore
from ._sqlite import SQLiteStore

__all__ = [
    "ArtifactInfo",
    "ArtifactMatch",
    "ArtifactStore",
    "DegradingStore",
    "FolderStore",
    "MemoryStore",
    "RedisStore",
    "SQLiteStore",
    "Store",
    "StoreError",
]
