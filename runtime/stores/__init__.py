"""State the resilience policies keep beyond one call: `MemoryStore` (this process, the
default), `SQLiteStore` (a file: survives a restart, shared by processes on one machine) and
`RedisStore` (shared by every server process that reaches the Redis), behind one `Store`
protocol; `DegradingStore` keeps the runtime going on memory while its store is down.
"""

from ._degrading import DegradingStore
from ._memory import MemoryStore
from ._protocol import Store, StoreError
from ._redis import RedisStore
from ._sqlite import SQLiteStore

__all__ = ["DegradingStore", "MemoryStore", "RedisStore", "SQLiteStore", "Store", "StoreError"]
