"""The docs as a newcomer meets them (issue 46): each page says what its programs need, and the
built site (mkdocs, strict) shows what the pages promise.

2, 3: every package a page's programs import (or run with `-m`) beyond what tool-runtime installs
is named by an install command on that page, and an extra installs it. 5: the file a later
program or command imports is named where the rendered page shows it (the code block's title),
and a block that continues another says so. 8: the site opened from disk links to files (not
folders) and its search works there (in a real headless Chromium when one is installed: `make
pytest` installs Debian's), the sidebar lists each page once, a search hit for a method names
its class, `Runtime` shows no internal constructor, the command line's synopsis has every
option, and `make docs` installs the docs extra alone.
"""

from __future__ import annotations

import ast
import html
import importlib.metadata
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]

_spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / "tools" / "doc_blocks.py")
assert _spec is not None
assert _spec.loader is not None
doc_blocks = importlib.util.module_from_spec(_spec)
sys.modules["doc_blocks"] = doc_blocks
_spec.loader.exec_module(doc_blocks)
PAGES = doc_blocks.pages(ROOT)


def distribution(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def extra_packages(extra: str) -> set[str]:
    """The distributions an extra installs (its own extras expanded)."""
    found: set[str] = set()
    for requirement in EXTRAS.get(extra, []):
        own = re.fullmatch(r"tool-runtime\[([^\]]+)\]", requirement.replace(" ", ""))
        if own:
            for name in own.group(1).split(","):
                found |= extra_packages(name)
        else:
            found.add(distribution(requirement))
    return found


def installed_with_the_runtime() -> set[str]:
    """The distributions `pip install tool-runtime` brings: its dependencies, and theirs."""
    seen: set[str] = set()
    stack = [distribution(r) for r in PROJECT["dependencies"]]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        stack.extend(distribution(r) for r in requires if "extra ==" not in r)
    return seen


def imported(page: Path) -> set[str]:
    """The top-level modules the page's programs import or run (`-m module`)."""
    modules: set[str] = set()
    for program in doc_blocks.programs(page, ROOT):
        if program.kind == "skip":  # not run here (and may import a module of the reader's)
            continue
        for node in ast.walk(ast.parse(program.code)):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
        modules |= set(re.findall(r"""["']-m["'],\s*["']([\w.]+)["']""", program.code))
    local = {p.arg.removesuffix(".py") for p in doc_blocks.programs(page, ROOT) if p.kind == "file"}
    return {m.split(".")[0] for m in modules} - set(sys.stdlib_module_names) - local - {"runtime"}


def named_installs(text: str) -> set[str]:
    """The distributions the page's `pip install ...` commands install (extras expanded)."""
    names: set[str] = set()
    for command in re.findall(r"pip install ([^`\n]+)", text):
        for word in command.split():
            word = word.strip("'\"")
            if word.startswith("-") or word == "#":
                continue
            extra = re.fullmatch(r"(?:\.|\S+\.whl)\[([^\]]+)\]", word)
            if extra:
                for name in extra.group(1).split(","):
                    names |= extra_packages(name)
            elif re.match(r"[A-Za-z]", word):
                names.add(distribution(word))
    return names


DISTRIBUTIONS = importlib.metadata.packages_distributions()


# -- 2, 3: what each page's programs need --------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_a_page_names_the_install_of_every_package_its_programs_use(page: Path) -> None:
    core = installed_with_the_runtime()
    named = named_installs(page.read_text(encoding="utf-8"))
    missing = []
    for module in sorted(imported(page)):
        owners = {distribution(d) for d in DISTRIBUTIONS.get(module, [module])}
        if owners & core:
            continue
        if not owners & named:
            missing.append(f"{module} ({', '.join(sorted(owners))})")
    assert missing == [], f"{page.relative_to(ROOT)} uses {missing} and does not say how to install it"


def test_an_extra_installs_what_the_docs_programs_use() -> None:
    core = installed_with_the_runtime()
    extras = extra_packages("examples") | extra_packages("ray")
    needed: dict[str, set[str]] = {}
    for page in PAGES:
        for module in imported(page):
            owners = {distribution(d) for d in DISTRIBUTIONS.get(module, [module])}
            if not owners & core:
                needed.setdefault(page.relative_to(ROOT).as_posix(), set()).update(owners)
    uncovered = {page: owners - extras for page, owners in needed.items() if not owners & extras}
    assert uncovered == {}
    assert "mcp-server-time" in extra_packages("examples")  # how-to/mcp-client.md runs it with -m


def test_the_mcp_client_program_checks_its_result_before_reading_its_value() -> None:
    programs = doc_blocks.programs(ROOT / "docs/how-to/mcp-client.md", ROOT)
    code = next(p.code for p in programs if "mcp_server_time" in p.code)
    assert code.index("if not result.ok") < code.index("result.value")


# -- the built site ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (`make docs` installs it)")
    where = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(where)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**_env(), "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr
    return where


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def page_html(site: Path, page: Path) -> str:
    relative = page.relative_to(ROOT / "docs").with_suffix(".html")
    return (site / relative).read_text(encoding="utf-8")


def titles(text: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r'<span class="filename">([^<]*)</span>', text)]


HEADLESS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000")
DOC_PAGES = [p for p in PAGES if p.is_relative_to(ROOT / "docs")]


@pytest.mark.parametrize("page", DOC_PAGES, ids=[p.relative_to(ROOT).as_posix() for p in DOC_PAGES])
def test_the_rendered_page_names_each_file_and_says_which_blocks_continue(site: Path, page: Path) -> None:
    shown = titles(page_html(site, page))
    text = page.read_text(encoding="utf-8")
    for program in doc_blocks.programs(page, ROOT):
        if program.kind == "file":
            assert program.arg in shown, f"{program.where}: the rendered page does not name {program.arg}"
    continued = text.count("<!-- docs: continue -->")
    assert sum("continued" in t for t in shown) == continued
    assert not re.search(r"<!--\s*docs:\s*file\s+(?!-->)\S", text)  # a name only in a comment is hidden


def links(site: Path) -> Iterator[tuple[Path, str]]:
    for page in site.rglob("*.html"):
        if page.name == "404.html":  # a web server's page (absolute links); never opened from disk
            continue
        for href in re.findall(r'(?:href|src)="([^"]*)"', page.read_text(encoding="utf-8")):
            yield page, href


def test_the_site_opened_from_disk_links_to_files_and_loads_nothing_from_the_network(site: Path) -> None:
    broken = []
    external_scripts = []
    for page, href in links(site):
        target = html.unescape(href).split("#", 1)[0].split("?", 1)[0]
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            if re.search(rf'<script src="{re.escape(href)}"', page.read_text(encoding="utf-8")):
                external_scripts.append(href)
            continue
        if not target:
            continue
        resolved = (page.parent / target).resolve()
        if not resolved.is_file():  # a folder opens its listing from disk, not its index.html
            broken.append(f"{page.relative_to(site)} -> {href}")
    assert broken == []
    assert external_scripts == []  # search's worker shim is served from the site itself
    assert (site / "search" / "search_index.js").is_file()  # the index a file:// page can load


def test_search_works_on_the_site_opened_from_disk_in_a_real_browser(site: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip(
            "no headless Chromium here (`make pytest` installs Debian's): the links are checked above"
        )
    page = (site / "index.html").as_uri() + "?q=call_many"
    shown = subprocess.run(
        [browser, *HEADLESS, "--dump-dom", page],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    results = re.findall(r'<li class="md-search-result__item">(.*?)</li>', shown.stdout, re.DOTALL)
    assert results, "no search results on the page opened from disk"
    found = [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", r)) for r in results]
    assert any("runtime.Runtime.call_many" in f for f in found), found


def test_the_sidebar_lists_each_page_once(site: Path) -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    pages = re.findall(r":\s*([\w./-]+\.md)\s*$|^\s*-\s*([\w./-]+\.md)\s*$", nav, re.MULTILINE)
    listed = [a or b for a, b in pages]
    assert len(listed) == len(set(listed)), [p for p in listed if listed.count(p) > 1]
    index = (site / "index.html").read_text(encoding="utf-8")
    reference = re.findall(r'href="(reference/[\w-]+\.html)"\s+class="md-nav__link', index)
    assert len(reference) == len(set(reference))


def test_a_search_hit_for_a_method_names_its_class(site: Path) -> None:
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    hits = [d["title"] for d in index["docs"] if d["location"].endswith(".call_many")]
    assert len(hits) >= 4
    assert len(set(hits)) == len(hits)
    assert all(re.match(r"runtime\.[\w.]+\.call_many", h) for h in hits), hits


def test_the_runtime_reference_shows_no_internal_constructor(site: Path) -> None:
    text = re.sub(r"<[^>]+>", "", (site / "reference" / "runtime.html").read_text(encoding="utf-8"))
    assert "open_runtime" in text
    assert "supervisor: Supervisor" not in text
    assert "routing: RegistryActor" not in text


def test_the_command_line_page_shows_every_option() -> None:
    from runtime.cli._main import _parser

    synopsis = re.search(r"```sh\n(.*?)```", (ROOT / "docs/how-to/command-line.md").read_text(), re.DOTALL)
    assert synopsis is not None
    parser = _parser("tool-runtime")
    commands: Any = next(a for a in parser._actions if a.dest == "command")
    missing = []
    for name, command in commands.choices.items():
        for action in command._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help" and option not in synopsis.group(1):
                    missing.append(f"{name} {option}")
    assert missing == []


def test_make_docs_installs_the_docs_extra_alone(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("no make here")
    planned = subprocess.run(
        ["make", "-n", "docs", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert planned.returncode == 0, planned.stderr
    assert "'.[dev]'" not in planned.stdout  # 145 of its 157 seconds, before
    assert "optional-dependencies']['docs']" in planned.stdout
    assert "mkdocs build --strict" in planned.stdout
