"""W5: the agent server under load (benchmarks/w5_app.py), on loopback, driven by wrk.

Each server runs in its own process (one worker); wrk (C, epoll; `make bench` installs it
with apt-get) keeps 200 connections busy with POSTs of one assistant message carrying 4 tool
calls (async I/O, CPU, small sync, sometimes raising; one request in ten also has malformed
arguments). Figures per configuration: requests/s, latency percentiles (wrk's own
histogram), and the server process's CPU time per request (from /proc). Ratios are against
the floor (the functions called directly) on the same server and loop, medians of the runs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._harness import RESULTS

CONNECTIONS = 200
PERCENTILES = [1, 5, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9]  # and the max

# (label, server, loop, mode)
CONFIGS: list[tuple[str, str, str, str]] = [
    ("uvicorn asyncio: floor", "uvicorn", "asyncio", "floor"),
    ("uvicorn asyncio: openai-agents", "uvicorn", "asyncio", "openai-agents"),
    ("uvicorn asyncio: runtime (guest)", "uvicorn", "asyncio", "runtime"),
    ("uvicorn asyncio: runtime (thread)", "uvicorn", "asyncio", "runtime-thread"),
    ("uvicorn uvloop: floor", "uvicorn", "uvloop", "floor"),
    ("uvicorn uvloop: openai-agents", "uvicorn", "uvloop", "openai-agents"),
    ("uvicorn uvloop: runtime (guest)", "uvicorn", "uvloop", "runtime"),
    ("uvicorn uvloop: runtime (thread)", "uvicorn", "uvloop", "runtime-thread"),
    ("hypercorn trio: floor", "hypercorn", "trio", "floor"),
    ("hypercorn trio: runtime (open_runtime)", "hypercorn", "trio", "runtime"),
]

_CALLS = [
    ("fetch", '{"key": "k%d"}'),
    ("digest", '{"text": "payload %d", "rounds": 100}'),
    ("lookup", '{"key": "k%d"}'),
    ("risky", '{"n": %d}'),
]


def bodies() -> list[str]:
    """Ten request bodies: call i of body n gets argument n (risky fails for n = 0)."""
    out = []
    for n in range(10):
        calls = [
            {"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": args % n}}
            for i, (name, args) in enumerate(_CALLS)
        ]
        if n == 7:  # malformed arguments, as a model sometimes writes them
            calls[2]["function"]["arguments"] = '{"key": '  # type: ignore[index]
        out.append(json.dumps({"message": {"role": "assistant", "content": None, "tool_calls": calls}}))
    return out


LUA = """
local bodies = %s
local counter = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  counter = counter + 1
  return wrk.format(nil, "/v1/tool_calls", nil, bodies[(counter %% #bodies) + 1])
end
done = function(summary, latency, requests)
  local out = {}
  for _, p in ipairs({%s}) do
    table.insert(out, string.format('"%%s": %%d', tostring(p), latency:percentile(p)))
  end
  io.write(string.format('W5RESULT {"requests": %%d, "duration_us": %%d, "errors": %%d, "non2xx": %%d, ' ..
    '"max_us": %%d, "percentiles_us": {%%s}}\\n',
    summary.requests, summary.duration,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status, latency.max, table.concat(out, ", ")))
end
"""


def _lua_script() -> str:
    quoted = ", ".join(json.dumps(b) for b in bodies())  # JSON strings are valid Lua strings here
    return LUA % ("{" + quoted + "}", ", ".join(str(p) for p in PERCENTILES))


@dataclass
class Run:
    requests: int
    seconds: float
    errors: int
    non2xx: int
    cpu_seconds: float
    max_us: float
    percentiles_us: dict[str, float]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


@dataclass
class Result:
    label: str
    server: str
    loop: str
    mode: str
    runs: list[Run] = field(default_factory=list)

    def median(self, what: str) -> float:
        values = {
            "rps": [r.rps for r in self.runs],
            "p50": [r.percentiles_us["50"] for r in self.runs],
            "p99": [r.percentiles_us["99"] for r in self.runs],
            "max": [r.max_us for r in self.runs],
            "cpu": [r.cpu_seconds / max(1, r.requests) * 1e6 for r in self.runs],
        }[what]
        return statistics.median(values)

    def median_run(self) -> Run:
        return sorted(self.runs, key=lambda r: r.rps)[len(self.runs) // 2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime, all threads


def _wait_up(port: int, process: subprocess.Popen[bytes]) -> None:
    for _ in range(300):
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the server did not start")


def _check(port: int) -> None:
    """Every body gets 4 tool messages, in order, each readable (before the load)."""
    for body in bodies():
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/tool_calls",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            messages = json.loads(reply.read())["messages"]
        ids = [c["id"] for c in json.loads(body)["message"]["tool_calls"]]
        if [m["tool_call_id"] for m in messages] != ids or not all(m["content"] for m in messages):
            raise AssertionError(f"bad tool messages: {messages}")


def _wrk(port: int, seconds: float, script: str, pid: int) -> Run:
    cpu = _cpu_seconds(pid)
    done = subprocess.run(
        [
            "wrk",
            "-t2",
            f"-c{CONNECTIONS}",
            f"-d{seconds:g}s",
            "--timeout",
            "30s",
            "-s",
            script,
            f"http://127.0.0.1:{port}/v1/tool_calls",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    cpu = _cpu_seconds(pid) - cpu
    line = next(x for x in done.stdout.splitlines() if x.startswith("W5RESULT "))
    data = json.loads(line.removeprefix("W5RESULT "))
    return Run(
        requests=data["requests"],
        seconds=data["duration_us"] / 1e6,
        errors=data["errors"],
        non2xx=data["non2xx"],
        cpu_seconds=cpu,
        max_us=data["max_us"],
        percentiles_us={k: float(v) for k, v in data["percentiles_us"].items()},
    )


def measure(label: str, server: str, loop: str, mode: str, runs: int, seconds: float, script: str) -> Result:
    port = _free_port()
    args = [
        sys.executable,
        "-m",
        "benchmarks.w5_app",
        "--server",
        server,
        "--mode",
        mode,
        "--port",
        str(port),
    ]
    if server == "uvicorn":
        args += ["--loop", loop]
    process = subprocess.Popen(args, cwd=Path(__file__).parent.parent)
    result = Result(label, server, loop, mode)
    try:
        _wait_up(port, process)
        _check(port)
        _wrk(port, min(2.0, seconds), script, process.pid)  # warm-up, not counted
        for _ in range(runs):
            result.runs.append(_wrk(port, seconds, script, process.pid))
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return result


def main(quick: bool = False) -> list[Result]:
    if shutil.which("wrk") is None:
        print("skip W5: wrk is not installed (`make bench` installs it with apt-get)")
        return []
    runs, seconds = (1, 3.0) if quick else (3, 8.0)
    results: list[Result] = []
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(_lua_script())
        script = f.name
    try:
        for label, server, loop, mode in CONFIGS:
            if mode == "openai-agents" and not _has("agents"):
                print(f"skip {label}: openai-agents is not installed (the bench extra)")
                continue
            print(f"W5 {label} ...", flush=True)
            results.append(measure(label, server, loop, mode, runs, seconds, script))
    finally:
        os.unlink(script)
    print_table(results)
    save(results, embedding_rows(quick))
    return results


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def floor_of(results: list[Result], r: Result) -> Result | None:
    return next((f for f in results if f.server == r.server and f.loop == r.loop and f.mode == "floor"), None)


def table_rows(results: list[Result]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        floor = floor_of(results, r)
        row: dict[str, Any] = {
            "label": r.label,
            "rps": r.median("rps"),
            "p50_ms": r.median("p50") / 1000,
            "p99_ms": r.median("p99") / 1000,
            "max_ms": r.median("max") / 1000,
            "cpu_us_per_request": r.median("cpu"),
            "errors": sum(x.errors + x.non2xx for x in r.runs),
            "requests": sum(x.requests for x in r.runs),
        }
        if floor is not None:
            row["rps_x_floor"] = r.median("rps") / floor.median("rps")
            row["p99_x_floor"] = r.median("p99") / floor.median("p99")
            row["cpu_x_floor"] = r.median("cpu") / floor.median("cpu")
        rows.append(row)
    return rows


def print_table(results: list[Result]) -> None:
    print("\n== W5 agent server (200 connections, 4 tool calls a request) ==")
    print(
        f"{'server':<40} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'CPU us/req':>10} "
        f"{'req/s x floor':>13} {'p99 x floor':>11} {'CPU x floor':>11} {'errors':>6}"
    )
    for row in table_rows(results):
        print(
            f"{row['label']:<40} {row['rps']:>8.0f} {row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f} "
            f"{row['max_ms']:>8.0f} {row['cpu_us_per_request']:>10.0f} "
            f"{row.get('rps_x_floor', 0):>13.2f} {row.get('p99_x_floor', 0):>11.2f} "
            f"{row.get('cpu_x_floor', 0):>11.2f} {row['errors']:>6}"
        )


def save(results: list[Result], embedding: list[dict[str, Any]]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "w5.json"
    data = {
        "name": "w5",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "connections": CONNECTIONS,
        "rows": table_rows(results),
        "runs": [asdict(r) for r in results],
        "embedding": embedding,
    }
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)


# -- the two asyncio embeddings, call by call --------------------------------------------------


EMBEDDED_TOOLS = {
    "risky": '{"n": 1}',  # async, cannot suspend: guest mode serves it in the asyncio task
    "lookup": '{"key": "k1"}',  # sync: a worker thread, reached through trio
}


async def _embedded_us(kind: str, n: int, batch: int, name: str = "risky") -> float:
    """Microseconds per `call_many` of `batch` calls of `name` from an asyncio task, sequentially."""
    from runtime import ToolCall
    from runtime.embed import RuntimeThread, open_asyncio_runtime

    from .w5_app import REGISTRY

    calls = [ToolCall(id=f"c{i}", name=name, arguments=EMBEDDED_TOOLS[name]) for i in range(batch)]
    if kind == "guest":
        async with open_asyncio_runtime(REGISTRY, tracing=False) as rt:
            await rt.call_many(calls)
            start = time.perf_counter()
            for _ in range(n):
                await rt.call_many(calls)
            return (time.perf_counter() - start) / n * 1e6
    with RuntimeThread(REGISTRY, tracing=False) as thread:
        await thread.acall_many(calls)
        start = time.perf_counter()
        for _ in range(n):
            await thread.acall_many(calls)
        return (time.perf_counter() - start) / n * 1e6


def embedding_rows(quick: bool = False) -> list[dict[str, Any]]:
    """Sequential `call_many` round trips from asyncio: guest mode against RuntimeThread."""
    import asyncio

    n = 300 if quick else 2000
    loops: dict[str, Any] = {"asyncio": asyncio.run}
    if _has("uvloop"):
        import uvloop

        loops["uvloop"] = uvloop.run
    rows = []
    for loop_name, run in loops.items():
        for name in EMBEDDED_TOOLS:
            for batch in (1, 4):
                times: dict[str, list[float]] = {"guest": [], "thread": []}
                for _ in range(3):
                    for kind in times:
                        times[kind].append(run(_embedded_us(kind, n, batch, name)))
                guest, thread = (statistics.median(times[k]) for k in ("guest", "thread"))
                rows.append(
                    {"loop": loop_name, "tool": name, "batch": batch, "guest_us": guest, "thread_us": thread}
                )
                print(
                    f"embedding {loop_name} {name} call_many({batch}): "
                    f"guest {guest:.0f} us, RuntimeThread {thread:.0f} us"
                )
    return rows
