"""W1 and W2 in instructions, not seconds: the runtime of this checkout against an earlier commit's.

    python -m benchmarks.w1_instructions                 # this tree against 5f48cd9
    python -m benchmarks.w1_instructions --before REV    # against another commit
    python -m benchmarks.w1_instructions --tree PATH     # against a checkout (a git worktree)

Wall-clock on a shared 2-core machine moves 10-50% between runs, too much to see 3%. So each
tree runs W1 (sequential `rt.call` of the async `add` tool, as `bench_runtime.runtime_seq`)
under `valgrind --tool=callgrind` twice, N calls and 3N calls, with PYTHONHASHSEED=0; the
difference over 2N is the instructions of one call, without the start-up both runs share. W2
is the same add tool, called in batches of 1,000 through `rt.call_many`.
A commit is read with `git archive` into a temporary directory; each child runs with its tree
as the working directory (`python -c`, so the cwd comes first on its path) and says which
`runtime` it imported, which must be that tree's.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "5f48cd9"  # the last commit before the resilience policies (c4a3314)
BEFORE_ONE_PATH = "396996a"  # the last commit before the one path (issue 21)

# One child: open a runtime as `bench_runtime.runtime_seq` does, warm it with one call, then
# N sequential calls. `subject` "w1" is the plain call (every policy off); "cache_hit" is the
# same call answered by a `Cache` (only on trees that have one); "policies" is W1 through three
# no-op policies.
CHILD = """
import sys
import trio
import runtime
from runtime import ToolCall, open_runtime, tool

print(runtime.__file__, file=sys.stderr)
n, subject = int(sys.argv[1]), sys.argv[2]


@tool
async def add(a: int, b: int) -> int:
    return a + b


@tool(inline=True)
def add_inline(a: int, b: int) -> int:
    return a + b


@tool
def add_thread(a: int, b: int) -> int:
    return a + b


tools = [add, add_inline, add_thread]
name = "add"
if subject == "cache_hit":
    from runtime import Cache

    @tool(read_only=True, cache=Cache(ttl=3600))
    async def add_cached(a: int, b: int) -> int:
        return a + b

    tools.append(add_cached)
    name = "add_cached"
policies = []
if subject == "policies":  # W1 + three no-op policies (`bench_runtime.NoOp`): the chain's cost
    from runtime import Policy

    class NoOp(Policy):
        def intercept(self, request):
            return (yield request)

    policies = [NoOp() for _ in range(3)]


async def main() -> None:
    async with open_runtime(tools, tracing=False, policies=policies) as rt:
        if subject == "w2":  # W2: batches of 1,000 concurrent calls (`call_many`), n calls in all
            calls = [ToolCall(id=f"c{i}", name=name, arguments='{"a": 1, "b": 2}') for i in range(1000)]
            assert all(r.ok for r in await rt.call_many(calls))
            for _ in range(n // 1000):
                await rt.call_many(calls)
            return
        call = ToolCall(id="c1", name=name, arguments='{"a": 1, "b": 2}')
        assert (await rt.call(call)).ok
        for _ in range(n):
            await rt.call(call)


trio.run(main)
"""

_TOTAL = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)


def valgrind() -> str | None:
    return shutil.which("valgrind")


def _no_aslr() -> list[str]:
    """`setarch -R`: the same addresses every run, so id-based hashes probe alike."""
    setarch = shutil.which("setarch")
    return [setarch, os.uname().machine, "-R"] if setarch else []


def callgrind(args: list[str], cwd: Path) -> tuple[int, str]:
    """(instructions, stderr) of one process `python *args` run under callgrind (start-up included)."""
    with tempfile.TemporaryDirectory(prefix="callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("PYTHONPATH", None)
        done = subprocess.run(
            [
                *_no_aslr(),
                valgrind() or "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                *args,
            ],
            cwd=cwd,
            env=env,
            capture_output=True,
            check=False,
        )
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"callgrind run failed in {cwd}:\n{done.stderr.decode()[-2000:]}")
        found = _TOTAL.search(out.read_bytes())
        if found is None:
            raise RuntimeError(f"no instruction total in {out}")
        return int(found.group(1)), done.stderr.decode()


def instructions(tree: Path, n: int, subject: str = "w1") -> int:
    """Instructions of one process that makes `n` calls (start-up included)."""
    total, stderr = callgrind(["-c", CHILD, str(n), subject], tree)
    imported = next((line for line in stderr.splitlines() if line.endswith(".py")), "")
    if not Path(imported).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"the child in {tree} imported runtime from {imported!r}, not its tree")
    return total


def per_call(tree: Path, n: int, subject: str = "w1") -> float:
    """Instructions of one call: (I(3n) - I(n)) / 2n."""
    return (instructions(tree, 3 * n, subject) - instructions(tree, n, subject)) / (2 * n)


def extract(rev: str, into: Path) -> Path:
    """The `runtime` package of commit `rev`, written under `into` (which is returned)."""
    archive = subprocess.run(["git", "archive", rev, "runtime"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def commit_of(tree: Path) -> str:
    """The short commit a checkout is at (its worktree's HEAD), or '?' for a plain directory."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else "?"


def compare(
    n: int, before: str = BEFORE, tree: Path | None = None, w2: bool = False, policies: bool = False
) -> dict[str, float | str]:
    """W1 instructions per call here and at `before` (or in `tree`), and a cache hit's here;
    with `w2`, W2's too (here and there); with `policies`, W1 through three no-op policies."""
    with tempfile.TemporaryDirectory(prefix="w1-before-") as tmp:
        old = tree if tree is not None else extract(before, Path(tmp))
        old_name = commit_of(tree) if tree is not None else before
        figures: dict[str, float | str] = {
            "before": old_name,
            "after": commit_of(ROOT),
            "n": n,
            "w1_before": per_call(old, n),
            "w1_after": per_call(ROOT, n),
            "cache_hit_after": per_call(ROOT, n, "cache_hit"),
        }
        if w2:
            figures["w2_before"] = per_call(old, n, "w2")
            figures["w2_after"] = per_call(ROOT, n, "w2")
        if policies:
            figures["policies_before"] = per_call(old, n, "policies")
            figures["policies_after"] = per_call(ROOT, n, "policies")
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.w1_instructions")
    parser.add_argument("--before", default=BEFORE, help=f"the commit to compare with (default {BEFORE})")
    parser.add_argument("--tree", type=Path, help="a checkout to compare with instead of --before")
    parser.add_argument("--n", type=int, default=5000, help="calls in the short run (the long one: 3n)")
    args = parser.parse_args()
    if valgrind() is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    figures = compare(args.n, args.before, args.tree, w2=True, policies=True)
    w1_before, w1_after = float(figures["w1_before"]), float(figures["w1_after"])
    print(f"W1 instructions per call, {figures['before']}: {w1_before:,.0f}")
    print(f"W1 instructions per call, {figures['after']} (this tree): {w1_after:,.0f}")
    print(f"ratio {w1_after / w1_before:.4f} (goal: within 3%)")
    w2_before, w2_after = float(figures["w2_before"]), float(figures["w2_after"])
    print(f"W2 instructions per call (batches of 1,000), {figures['before']}: {w2_before:,.0f}")
    print(f"W2 instructions per call (batches of 1,000), {figures['after']} (this tree): {w2_after:,.0f}")
    print(f"ratio {w2_after / w2_before:.4f}")
    print(
        f"cache hit, this tree: {float(figures['cache_hit_after']):,.0f} ({float(figures['cache_hit_after']) / w1_after:.3f}x W1)"
    )
    p_before, p_after = float(figures["policies_before"]), float(figures["policies_after"])
    print(
        f"W1 + three no-op policies, {figures['before']}: {p_before:,.0f} (+{p_before - w1_before:,.0f} over W1)"
    )
    print(
        f"W1 + three no-op policies, {figures['after']} (this tree): {p_after:,.0f} (+{p_after - w1_after:,.0f} over W1)"
    )
    print(f"ratio {p_after / p_before:.4f}")


if __name__ == "__main__":
    main()
