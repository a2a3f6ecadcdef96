"""`make conformance`: the official MCP conformance suite against our server and our client.

    python -m conformance.run [--node-bin DIR] [--jobs 2] [--only server|client]

- Server: `python -m runtime serve conformance.server:registry --http 127.0.0.1:0` is started
  once, and every server scenario of the suite runs against it at each spec revision the
  suite covers (2025-11-25, 2026-07-28).
- Client: every client scenario runs `python -m conformance.client` (a runtime with one
  MCP server) at each revision it applies to, two scenarios at a time.
- `conformance/not-claimed.yaml` is the suite's expected-failures baseline: a scenario listed
  there may fail, one not listed must pass, and a listed one that passes fails the run.

Prints one line per run and a summary of the scenarios that passed; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASELINE = HERE / "not-claimed.yaml"
RESULTS = HERE / "results"
REVISIONS = ("2025-11-25", "2026-07-28")
SCENARIO_TIMEOUT_MS = 30_000
_LISTED = re.compile(r"^\s+- (?P<name>\S+) \[(?P<versions>[^\]]*)\]")


def suite(node_bin: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{node_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [str(node_bin / "conformance"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def scenarios(node_bin: Path) -> dict[str, dict[str, list[str]]]:
    """{"server" | "client": {scenario: [versions]}} as `conformance list` prints them."""
    listed = suite(node_bin, "list")
    found: dict[str, dict[str, list[str]]] = {"server": {}, "client": {}}
    side: str | None = None
    for line in listed.stdout.splitlines():
        if line.startswith("Server scenarios"):
            side = "server"
        elif line.startswith("Client scenarios"):
            side = "client"
        elif line and not line.startswith(" "):
            side = None
        match = _LISTED.match(line)
        if side is not None and match:
            found[side][match["name"]] = [v.strip() for v in match["versions"].split(",")]
    return found


def not_claimed() -> dict[str, set[str]]:
    """{"server" | "client": entries} of the baseline (`scenario` or `scenario:check-id`)."""
    found: dict[str, set[str]] = {"server": set(), "client": set()}
    side = None
    for line in BASELINE.read_text(encoding="utf-8").splitlines():
        if line.rstrip() in ("server:", "client:"):
            side = line.rstrip()[:-1]
            continue
        match = re.match(r"^\s+- (\S+)", line)
        if side is not None and match:
            found[side].add(match[1])
    return found


def verdicts(results: Path, prefix: str, revision: str, baseline: set[str]) -> list[str]:
    """One line per scenario run that is not wholly not-claimed: passed, or passed but for listed checks."""
    lines: list[str] = []
    for folder in sorted(results.glob(f"{prefix}*")):
        match = re.match(rf"^{re.escape(prefix)}(.+)-\d{{4}}-\d\d-\d\dT", folder.name)
        checks_file = folder / "checks.json"
        if match is None or not checks_file.exists():
            continue
        name = match[1]
        if name in baseline:
            continue
        checks = json.loads(checks_file.read_text(encoding="utf-8"))
        counted = [c for c in checks if c.get("status") in ("SUCCESS", "FAILURE", "WARNING")]
        if not counted:
            continue  # every check skipped: nothing applies to us
        excused = sorted({c["id"] for c in checks if c.get("status") in ("FAILURE", "WARNING")})
        note = f" (not claimed: {', '.join(excused)})" if excused else ""
        lines.append(f"{name} @ {revision}: {len(counted) - len(excused)} checks pass{note}")
    return lines


def start_server() -> tuple[subprocess.Popen[str], str]:
    """Our server on a free loopback port, and its URL."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runtime",
            "serve",
            "conformance.server:registry",
            "--http",
            "127.0.0.1:0",
            "--sse-poll-after",
            "0.2",  # test_reconnection runs 0.5 s: its stream is closed and the client polls
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        match = re.search(r"at (http://\S+)", line)
        if match:
            return process, match[1]
    process.wait()
    raise SystemExit(f"the conformance server did not start (exit status {process.returncode})")


def run_server(node_bin: Path, listed: dict[str, list[str]]) -> tuple[bool, list[str]]:
    # Extensions (the tasks suite) are not on the spec timeline: `--spec-version` leaves them out,
    # so each is run on its own, once, at the latest revision (as the client's are).
    extensions = [name for name, versions in listed.items() if not set(versions) & set(REVISIONS)]
    process, url = start_server()
    ok = True
    passed: list[str] = []
    try:
        for revision in REVISIONS:
            out = suite(
                node_bin,
                "server",
                "--url",
                url,
                "--suite",
                "all",
                "--spec-version",
                revision,
                "--expected-failures",
                str(BASELINE),
                "-o",
                str(RESULTS / f"server-{revision}"),
            )
            passed += [
                f"server {v}"
                for v in verdicts(RESULTS / f"server-{revision}", "server-", revision, NOT_CLAIMED["server"])
            ]
            status = "ok" if out.returncode == 0 else "FAILED"
            print(f"server scenarios @ {revision}: {status}", flush=True)
            if out.returncode != 0:
                ok = False
                print(out.stdout[-6000:], out.stderr[-3000:], sep="\n")
        revision = REVISIONS[-1]
        folder = RESULTS / f"server-extensions-{revision}"
        for name in extensions:
            out = suite(
                node_bin,
                "server",
                "--url",
                url,
                "--scenario",
                name,
                "--spec-version",
                revision,
                "--force",
                "--expected-failures",
                str(BASELINE),
                "-o",
                str(folder),
            )
            if out.returncode != 0:
                ok = False
                print(f"server {name} @ {revision}: FAILED", flush=True)
                print(out.stdout[-6000:], out.stderr[-3000:], sep="\n")
        passed += [f"server {v}" for v in verdicts(folder, "server-", revision, NOT_CLAIMED["server"])]
        print(f"server extension scenarios @ {revision}: {'ok' if ok else 'FAILED'}", flush=True)
    finally:
        process.terminate()
        process.wait(timeout=10)
    return ok, passed


def run_client(node_bin: Path, listed: dict[str, list[str]], jobs: int) -> tuple[bool, list[str]]:
    runs: list[tuple[str, str]] = []
    for name, versions in listed.items():
        applicable = [r for r in REVISIONS if r in versions]
        if not applicable:  # extensions: not on the spec timeline, run once at the latest revision
            applicable = [REVISIONS[-1]]
        runs.extend((name, revision) for revision in applicable)
    command = f"{sys.executable} -m conformance.client"

    def one(run: tuple[str, str]) -> tuple[str, str, subprocess.CompletedProcess[str]]:
        name, revision = run
        out = suite(
            node_bin,
            "client",
            "--command",
            command,
            "--scenario",
            name,
            "--spec-version",
            revision,
            "--force",
            "--timeout",
            str(SCENARIO_TIMEOUT_MS),
            "--expected-failures",
            str(BASELINE),
            "-o",
            str(RESULTS / f"client-{revision}"),
            timeout=SCENARIO_TIMEOUT_MS / 1000 + 60,
        )
        return name, revision, out

    ok = True
    passed: list[str] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for name, revision, out in pool.map(one, runs):
            text = out.stdout + out.stderr
            expected = "expected failure" in text.lower() or "baseline" in text.lower()
            clean = out.returncode == 0 and "OVERALL: PASSED" in text
            empty = "Passed: 0/0, 0 failed, 0 warnings" in text  # every check skipped
            status = (
                "FAILED"
                if out.returncode != 0
                else "skipped (no checks apply)"
                if empty
                else "passed"
                if clean
                else "not claimed"
            )
            print(f"client {name} @ {revision}: {status}", flush=True)
            if out.returncode != 0:
                ok = False
                print(text[-6000:])
            elif not clean and not expected:
                print(text[-2000:])
    for revision in REVISIONS:
        folder = RESULTS / f"client-{revision}"
        passed += [f"client {v}" for v in verdicts(folder, "", revision, NOT_CLAIMED["client"])]
    return ok, passed


NOT_CLAIMED = not_claimed()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--node-bin", type=Path, default=HERE / "node_modules" / ".bin")
    parser.add_argument("--jobs", type=int, default=2, help="client scenarios run at once")
    parser.add_argument("--only", choices=("server", "client"))
    args = parser.parse_args()
    began = time.monotonic()
    shutil.rmtree(RESULTS, ignore_errors=True)
    version = suite(args.node_bin, "--version").stdout.strip()
    print(f"@modelcontextprotocol/conformance {version}, revisions {', '.join(REVISIONS)}", flush=True)
    listed = scenarios(args.node_bin)
    ok = True
    passed: list[str] = []
    if args.only in (None, "server"):
        server_ok, server_passed = run_server(args.node_bin, listed["server"])
        ok &= server_ok
        passed += server_passed
    if args.only in (None, "client"):
        client_ok, client_passed = run_client(args.node_bin, listed["client"], args.jobs)
        ok &= client_ok
        passed += client_passed
    print(f"\npassed ({len(passed)}), suite {version}:")
    for line in passed:
        print(f"  {line}")
    print(f"{'ok' if ok else 'FAILED'} in {time.monotonic() - began:.0f}s (not claimed: {BASELINE.name})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
