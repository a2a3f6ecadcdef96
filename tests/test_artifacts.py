"""Results over their limit kept whole as artifacts (issue 24, DESIGN.md 3.12), in one process:

- a 50 MB result is stored whole; the model's text is under the limit (a handle, the size, the
  start and the end, one sentence on how to read more); the process grows by what the result and
  its one stored copy hold, no more; it reads back byte-exact through the built-in tool;
- a principal reads only its own artifacts: another's handle, an expired one and a dropped one
  are REJECTED with a reason the model reads;
- images and binary parts over `max_inline_bytes`, text parts and embedded text resources too;
- the cap drops the oldest first; a piece over the cap is cut as it is without artifacts;
- a tool's own `max_result_chars`; every store: memory, a folder, SQLite, Redis;
- a keeping that has to wait is stopped by its call's deadline and its caller's cancellation
  (one result each), and nothing is left half-written.
"""

from __future__ import annotations

import gc
import hashlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from runtime import (
    ArtifactMissing,
    Artifacts,
    ContentPart,
    FailureKind,
    ImagePart,
    ResourceLinkPart,
    ResourcePart,
    TextPart,
    Tool,
    ToolCall,
    ToolDefinitionError,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    open_runtime,
    tool,
)
from runtime.stores import MemoryStore, RedisStore, SQLiteStore

LIMIT = 100_000  # the runtime's default max_result_chars


def megabytes_of_text(n: int) -> str:
    line = "".join(f"{i:08d} the quick brown fox jumps over the lazy dog\n" for i in range(20_000))
    return (line * (n * 1_000_000 // len(line) + 1))[: n * 1_000_000]


@tool
async def report(megabytes: int) -> str:
    """A report of `megabytes` MB."""
    await trio.lowlevel.checkpoint()
    return megabytes_of_text(megabytes)


@tool
async def text_of(n: int, letter: str = "a") -> str:
    """`n` times `letter`."""
    await trio.lowlevel.checkpoint()
    return letter * n


def call(tool_name: str, call_id: str = "c", **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=tool_name, arguments=arguments)


def link_of(result: ToolResult) -> ResourceLinkPart:
    assert isinstance(result, ToolSuccess), result
    (link,) = [p for p in result.parts if isinstance(p, ResourceLinkPart)]
    return link


def rss() -> int:
    """This process's resident memory now, in bytes (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- 50 MB --------------------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc (Linux)")
@pytest.mark.timeout(300)
async def test_a_50_mb_result_is_kept_whole_with_bounded_memory_and_reads_back_byte_exact() -> None:
    size = 50_000_000
    expected = hashlib.sha256(megabytes_of_text(50).encode()).hexdigest()
    async with open_runtime([report], tracing=False, artifacts=Artifacts()) as rt:
        gc.collect()
        before = rss()
        result = await rt.call(call("report", megabytes=50), principal="alice")
        gc.collect()
        grown = rss() - before
        # The bound: the tool's own 50 MB string (it is `result.value`, which this test holds) and
        # the one copy kept (50 MB of UTF-8 in 1 MiB chunks), plus 25 MB for what the allocator and
        # the worker threads hold on to. A second copy anywhere (the text joined again, encoded
        # whole before it was cut in chunks, JSON of it) would be 50 MB more and fail this.
        assert grown < 2 * size + 25_000_000, f"RSS grew by {grown / 1e6:.1f} MB"
        assert isinstance(result, ToolSuccess)
        link = link_of(result)
        assert (link.size, link.mime_type, link.uri) == (size, "text/plain", f"artifact://{link.name}")
        # what the model reads: under the limit; the handle, the size, both ends, how to read more
        assert len(result.content) <= LIMIT
        assert all(len(p.text) <= LIMIT for p in result.parts if isinstance(p, TextPart))
        assert link.name in result.content
        assert "50,000,000 characters" in result.content
        text = megabytes_of_text(1)  # its start; its end is the end of 50 such MB
        assert text[:500] in result.content
        assert megabytes_of_text(50)[-500:] in result.content
        assert f'read_artifact(handle="{link.name}"' in result.content
        # Once the caller lets go of the result, what is left is the one copy kept (50 MB), plus
        # 15 MB of slack: no worker, task or call holds the result alive.
        del result
        gc.collect()
        kept = rss() - before
        assert kept < size + 15_000_000, f"RSS is {kept / 1e6:.1f} MB over its start, the result dropped"
        # read back through the built-in tool, page by page, byte-exact
        hasher = hashlib.sha256()
        offset, pages = 0, 0
        while True:
            page = await rt.call(
                call("read_artifact", f"p{pages}", handle=link.name, offset=offset, length=LIMIT),
                principal="alice",
            )
            assert isinstance(page, ToolSuccess), page
            assert len(page.content) <= LIMIT
            header, body = page.content.split("\n", 1)
            assert header.startswith(f"[artifact {link.name}: characters {offset:,} to ")
            hasher.update(body.encode())
            offset += len(body)
            pages += 1
            if header.endswith("that is the end]"):
                break
        assert offset == size
        assert hasher.hexdigest() == expected
        # another principal's read is refused, with the reason
        refused = await rt.call(call("read_artifact", handle=link.name), principal="mallory")
        assert isinstance(refused, ToolFailure)
        assert refused.kind is FailureKind.REJECTED
        assert f"no artifact {link.name} is kept for you" in refused.message


# -- scope, expiry, the cap ---------------------------------------------------------------------


async def test_a_handle_is_read_within_its_principals_scope_only(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime([text_of], tracing=False, artifacts=Artifacts(ttl=60)) as rt:
        kept = await rt.call(call("text_of", n=LIMIT + 1), principal="alice")
        handle = link_of(kept).name
        mine = await rt.call(call("read_artifact", handle=handle, length=10), principal="alice")
        theirs = await rt.call(call("read_artifact", handle=handle, length=10), principal="bob")
        nobody = await rt.call(call("read_artifact", handle=handle, length=10))
        bogus = await rt.call(call("read_artifact", handle="../etc/passwd"), principal="alice")
        assert rt.artifacts is not None
        with pytest.raises(ArtifactMissing):
            await rt.artifacts.read("bob", handle)
    assert isinstance(mine, ToolSuccess)
    assert mine.content.endswith("\naaaaaaaaaa")
    for refused in (theirs, nobody, bogus):
        assert isinstance(refused, ToolFailure)
        assert refused.kind is FailureKind.REJECTED
    assert "no artifact" in theirs.content
    assert "kept for you" in theirs.content
    assert "is not an artifact handle" in bogus.content


async def test_an_expired_handle_is_refused_saying_it_expired(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime([text_of], tracing=False, artifacts=Artifacts(ttl=60)) as rt:
        handle = link_of(await rt.call(call("text_of", n=LIMIT + 1), principal="alice")).name
        await trio.sleep(61)  # virtual seconds: past its TTL
        expired = await rt.call(call("read_artifact", handle=handle), principal="alice")
    assert isinstance(expired, ToolFailure)
    assert expired.kind is FailureKind.REJECTED
    assert f"artifact {handle} has expired (artifacts are kept 60 s)" in expired.message


async def test_the_cap_drops_the_oldest_first_and_a_piece_over_it_is_cut() -> None:
    async with open_runtime(
        [text_of], tracing=False, max_result_chars=300, artifacts=Artifacts(max_bytes=1000)
    ) as rt:
        first = link_of(await rt.call(call("text_of", n=400, letter="a"), principal="p")).name
        second = link_of(await rt.call(call("text_of", n=400, letter="b"), principal="p")).name
        third = link_of(await rt.call(call("text_of", n=400, letter="c"), principal="p")).name
        dropped = await rt.call(call("read_artifact", handle=first), principal="p")
        kept = await rt.call(call("read_artifact", handle=second, length=5), principal="p")
        over = await rt.call(call("text_of", n=2000), principal="p")  # larger than the whole cap
        assert rt.artifacts is not None
        assert rt.artifacts.statistics() == {"artifacts": 2, "bytes": 800}
    assert third != second
    assert isinstance(dropped, ToolFailure)
    assert "was dropped to make room for newer ones" in dropped.message
    assert isinstance(kept, ToolSuccess)
    assert kept.content.endswith("bbbbb")
    assert isinstance(over, ToolSuccess)
    assert over.parts == ()
    assert over.content == "a" * 300 + "\n[truncated: the result had 2000 characters; showing the first 300]"


async def test_the_cap_makes_room_in_the_principal_that_holds_the_most() -> None:
    async with open_runtime(
        [text_of], tracing=False, max_result_chars=300, artifacts=Artifacts(max_bytes=1000)
    ) as rt:

        async def keep(who: str, n: int, letter: str) -> ToolResult:
            return await rt.call(call("text_of", n=n, letter=letter), principal=who)

        async def readable(who: str, result: ToolResult) -> bool:
            return (await rt.call(call("read_artifact", handle=link_of(result).name), principal=who)).ok

        b1, b2 = await keep("bob", 400, "a"), await keep("bob", 400, "b")
        e1 = await keep("eve", 400, "c")  # bob holds the most: his oldest goes
        assert not await readable("bob", b1)
        e2 = await keep("eve", 400, "d")  # now eve does: hers goes, not bob's
        assert await readable("bob", b2)
        assert not await readable("eve", e1)
        assert await readable("eve", e2)
        # carol's piece would leave her holding the most with nothing of hers to drop: cut
        carol = await keep("carol", 500, "e")
        assert rt.artifacts is not None
        assert rt.artifacts.statistics() == {"artifacts": 2, "bytes": 800}
    assert isinstance(carol, ToolSuccess)
    assert carol.parts == ()
    assert carol.content.startswith("e" * 300 + "\n[truncated")


async def test_the_same_content_is_one_artifact_and_the_same_handle() -> None:
    async with open_runtime([text_of], tracing=False, max_result_chars=100, artifacts=Artifacts()) as rt:
        results = await rt.call_many([call("text_of", str(i), n=500) for i in range(5)], principal="p")
        other = await rt.call(call("text_of", n=500), principal="q")
        assert rt.artifacts is not None
        stats = rt.artifacts.statistics()
    handles = {link_of(r).name for r in results}
    assert len(handles) == 1  # the model that calls the same tool again gets the same handle
    assert link_of(other).name in handles  # content-addressed, in q's own scope
    assert stats == {"artifacts": 2, "bytes": 1000}


async def test_a_tools_own_max_result_chars_is_its_limit() -> None:
    @tool(max_result_chars=50)
    async def terse(n: int) -> str:
        return "x" * n

    async with open_runtime([terse, text_of], tracing=False, artifacts=Artifacts()) as rt:
        over = await rt.call(call("terse", n=51))
        under = await rt.call(call("text_of", n=51))
    assert len(over.content) <= 50
    assert link_of(over).size == 51
    assert under.content == "a" * 51


async def test_grep_finds_the_lines_and_their_offsets() -> None:
    lines = [f"line {i}: {'ERROR' if i % 1000 == 7 else 'ok'}" for i in range(30_000)]
    text = "\n".join(lines)

    @tool
    async def log() -> str:
        return text

    async with open_runtime([log], tracing=False, artifacts=Artifacts()) as rt:
        handle = link_of(await rt.call(call("log"), principal="ops")).name
        found = await rt.call(
            call("grep_artifact", handle=handle, pattern=r"ERROR$", max_matches=3), principal="ops"
        )
        none = await rt.call(call("grep_artifact", handle=handle, pattern="panic"), principal="ops")
        bad = await rt.call(call("grep_artifact", handle=handle, pattern="(unclosed"), principal="ops")
        offset = text.index("line 1007:")
        page = await rt.call(call("read_artifact", handle=handle, offset=offset, length=16), principal="ops")
    assert found.content.splitlines() == [
        f"offset {text.index(f'line {i}:')} (line {i + 1}): line {i}: ERROR" for i in (7, 1007, 2007)
    ]
    assert none.content == f"no line of artifact {handle} matches 'panic'"
    assert isinstance(bad, ToolFailure)
    assert bad.kind is FailureKind.REJECTED
    assert "is not a regular expression" in bad.message
    assert page.content.endswith("\nline 1007: ERROR")


# -- parts ------------------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8192  # 2 MiB of "image"


class Album(Tool[msgspec.Struct, list[ContentPart]]):
    """An image, a long text part and a long embedded resource."""

    name = "album"

    async def execute(self, args: msgspec.Struct) -> list[ContentPart]:
        return [
            TextPart(text="three pieces:"),
            ImagePart(data=PNG, mime_type="image/png"),
            TextPart(text="t" * 5000),
            ResourcePart(uri="file:///log.txt", mime_type="text/plain", text="r" * 5000),
            ImagePart(data=b"tiny", mime_type="image/png"),
        ]

    def result_to_text(self, result: list[ContentPart]) -> str:
        return "three pieces"

    def result_to_parts(self, result: list[ContentPart]) -> list[ContentPart]:
        return result


async def test_images_and_parts_over_their_limits_are_kept_and_linked() -> None:
    options = Artifacts(max_inline_bytes=1 << 20)
    async with open_runtime([Album()], tracing=False, max_result_chars=1000, artifacts=options) as rt:
        result = await rt.call(call("album"), principal="p")
        assert isinstance(result, ToolSuccess)
        assert rt.artifacts is not None
        links = [p for p in result.parts if isinstance(p, ResourceLinkPart)]
        kept = [await rt.artifacts.read("p", link.name) for link in links]
    kinds = [type(p).__name__ for p in result.parts]
    assert kinds == [
        "TextPart",  # as it was
        "TextPart",  # the image's note
        "ResourceLinkPart",
        "TextPart",  # the long text's note
        "ResourceLinkPart",
        "TextPart",  # the resource's note
        "ResourceLinkPart",
        "ImagePart",  # small: as it was
    ]
    assert [link.mime_type for link in links] == ["image/png", "text/plain", "text/plain"]
    assert kept == [PNG, "t" * 5000, "r" * 5000]
    assert "an image (image/png) of 2,097,160 bytes" in result.parts[1].text  # type: ignore[union-attr]
    assert all(len(p.text) <= 1000 for p in result.parts if isinstance(p, TextPart))


# -- stores ------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.kill()
        process.wait(timeout=10)


def _stores(tmp_path: Path) -> dict[str, Any]:
    return {
        "memory": MemoryStore(),
        "folder": tmp_path / "artifacts",
        "sqlite": SQLiteStore(tmp_path / "a.db"),
    }


@pytest.mark.parametrize("kind", ["memory", "folder", "sqlite", "redis"])
async def test_every_store_keeps_and_reads_a_large_result(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = RedisStore(request.getfixturevalue("redis_url")) if kind == "redis" else _stores(tmp_path)[kind]
    text = megabytes_of_text(3)  # over INLINE: kept by a task, in worker threads and store steps
    async with open_runtime([report], tracing=False, artifacts=Artifacts(store=store)) as rt:
        result = await rt.call(call("report", megabytes=3), principal="alice")
        link = link_of(result)
        assert rt.artifacts is not None
        whole = await rt.artifacts.read("alice", link.name)
        middle = await rt.call(
            call("read_artifact", handle=link.name, offset=1_500_000, length=1000), principal="alice"
        )
        listed = await rt.artifacts.listing("alice")
        refused = await rt.call(call("read_artifact", handle=link.name), principal="bob")
    assert whole == text
    assert middle.content.split("\n", 1)[1] == text[1_500_000:1_501_000]
    assert [info.handle for info in listed] == [link.name]
    assert refused.kind is FailureKind.REJECTED  # type: ignore[union-attr]
    if kind == "folder":
        assert len(list((tmp_path / "artifacts").iterdir())) == 1 + 3  # its description, 3 chunks


# -- a keeping that waits ------------------------------------------------------------------------------


class LaggingStore(MemoryStore):
    """A store `lag` seconds away (as a remote one is): every write takes that long."""

    def __init__(self, lag: float) -> None:
        super().__init__()
        self.lag = lag

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        await trio.sleep(self.lag)
        await super().set(key, value, ttl)


async def test_a_keeping_that_waits_is_stopped_by_the_deadline_and_the_caller(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = LaggingStore(10.0)
    async with open_runtime(
        [text_of], tracing=False, max_result_chars=100, artifacts=Artifacts(store=store)
    ) as rt:
        began = trio.current_time()
        timed = await rt.call(call("text_of", "t", n=1000), timeout=5)
        assert trio.current_time() - began == pytest.approx(5)
        with trio.move_on_after(3) as scope:
            await rt.call(call("text_of", "c", n=1001))
        assert scope.cancelled_caught
        done = await rt.call(call("text_of", "d", n=1002))  # no deadline: it waits for the store
        stats = rt.statistics().tools["text_of"]
        assert rt.artifacts is not None
        kept = rt.artifacts.statistics()
    assert isinstance(timed, ToolFailure)
    assert timed.kind is FailureKind.TIMEOUT
    assert link_of(done).size == 1002
    assert (stats.calls, stats.in_flight, stats.abandoned) == (3, 0, 0)
    assert stats.failures == {"timeout": 1, "cancelled": 1}
    assert kept == {"artifacts": 1, "bytes": 1002}  # the stopped ones left nothing kept
    assert [k for k in store._data if "artifact:" in k and k.endswith(link_of(done).name)]


async def test_a_placed_tools_large_result_is_kept_whole_here() -> None:
    import placement_tools as pt

    async with open_runtime([pt.big_text], tracing=False, artifacts=Artifacts()) as rt:
        result = await rt.call(call("big_text", megabytes=8), principal="p")
        assert rt.artifacts is not None
        whole = await rt.artifacts.read("p", link_of(result).name)
    assert whole == "0123456789abcdef" * (8 << 16)  # built in the worker process, kept whole here
    assert len(result.content) <= LIMIT


async def test_artifacts_true_is_the_defaults_and_bad_options_say_what_they_must_be() -> None:
    async with open_runtime([text_of], tracing=False, artifacts=True) as rt:
        assert rt.artifacts is not None
        assert (rt.artifacts.ttl, rt.artifacts.max_bytes) == (3600.0, 256 << 20)
        assert "read_artifact" in rt.registry
    async with open_runtime([text_of], tracing=False) as rt:
        assert rt.artifacts is None  # off unless asked for: results over the limit are cut
        assert "read_artifact" not in rt.registry
    with pytest.raises(ValueError, match=r"must be a runtime\.stores store or a folder"):
        Artifacts(store=object())
    with pytest.raises(ToolDefinitionError, match="max_result_chars must be a positive int or None, not 0"):

        @tool(max_result_chars=0)
        async def nothing() -> str:
            return ""

    @tool
    async def read_artifact() -> str:
        return "mine"

    with pytest.raises(ToolDefinitionError, match="a tool is named 'read_artifact'"):
        async with open_runtime([read_artifact], tracing=False, artifacts=True):
            pass
