"""Every Python block of README.md and docs/ runs, as the program it shows (tools/doc_blocks.py).

The convention a page's blocks follow (complete programs; `<!-- docs: continue -->`, `file`,
`server`, `output` and `skip` markers) is written at the top of tools/doc_blocks.py.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / "tools" / "doc_blocks.py")
assert _spec is not None
assert _spec.loader is not None
doc_blocks = importlib.util.module_from_spec(_spec)
sys.modules["doc_blocks"] = doc_blocks
_spec.loader.exec_module(doc_blocks)

PAGES = doc_blocks.pages(ROOT)

HEAVY = {
    "docs/how-to/ray.md": "starts a Ray cluster of two nodes of its own",
    "docs/tutorial/placement.md": "starts a local Ray of its own",
    "docs/how-to/integrations.md": "five programs, each importing an agent framework",
}
"""Pages run by `make test-slow` only (tens of seconds each, minutes on a loaded machine); what
they show is tested in `make test` by tests/test_placement_ray*.py, test_placement_subprocess.py
and test_integrations_*.py."""


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(p, marks=pytest.mark.slow) if p.relative_to(ROOT).as_posix() in HEAVY else p
        for p in PAGES
    ],
    ids=[p.relative_to(ROOT).as_posix() for p in PAGES],
)
def test_every_program_of_the_page_runs(page: Path) -> None:
    doc_blocks.run_page(page)


def test_the_heavy_pages_are_pages() -> None:
    assert set(HEAVY) <= {p.relative_to(ROOT).as_posix() for p in PAGES}


def test_the_readme_opens_with_a_complete_program_and_shows_what_it_prints() -> None:
    first = doc_blocks.programs(ROOT / "README.md", ROOT)[0]
    assert first.kind == "run"
    assert first.output
    assert "trio.run(" in first.code


def test_blocks_that_do_not_run_are_few_and_say_why() -> None:
    skipped = [p for page in PAGES for p in doc_blocks.programs(page, ROOT) if p.kind == "skip"]
    assert all(p.arg for p in skipped)
    assert len(skipped) <= 3, [p.where for p in skipped]


def test_the_runner_holds_blocks_to_the_convention(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        '```python\nx = 1\n```\n\n<!-- docs: continue -->\n```python title="a.py (continued)"\nprint(x + 1)\n```\n'
        "<!-- docs: output -->\n```text\n2\n```\n"
        "<!-- docs: skip needs a person -->\n```python\ninput()\n```\n"
        '<!-- docs: file -->\n```python title="helper.py"\nY = 3\n```\n'
        "```python\nimport helper\nprint(helper.Y)\n```\n<!-- docs: output -->\n```text\n3\n```\n"
    )
    found = doc_blocks.run_page(page, root=tmp_path)
    assert [(p.kind, p.blocks, p.output, p.arg) for p in found] == [
        ("run", 2, "2\n", ""),
        ("skip", 1, None, "needs a person"),
        ("file", 1, None, "helper.py"),
        ("run", 1, "3\n", ""),
    ]

    # What the reader sees says it: a continued block in its title, a file's name as the block's title.
    page.write_text("```python\nx = 1\n```\n<!-- docs: continue -->\n```python\nprint(x)\n```\n")
    with pytest.raises(doc_blocks.PageError, match="says so where the reader sees it"):
        doc_blocks.programs(page, tmp_path)
    page.write_text("<!-- docs: file helper.py -->\n```python\nY = 3\n```\n")
    with pytest.raises(doc_blocks.PageError, match="the file's name goes in the block's title"):
        doc_blocks.programs(page, tmp_path)

    page.write_text("```python\nprint(1)\n```\n<!-- docs: output -->\n```text\n2\n```\n")
    with pytest.raises(doc_blocks.PageError, match=r"page.md:1: printed\n1\n\nbut the page shows\n2"):
        doc_blocks.run_page(page, root=tmp_path)

    page.write_text("<!-- docs: skip -->\n```python\ninput()\n```\n")
    with pytest.raises(doc_blocks.PageError, match="needs a reason"):
        doc_blocks.programs(page, tmp_path)

    page.write_text("```python\nundefined_name\n```\n")
    with pytest.raises(doc_blocks.PageError, match=r"(?s)page.md:1: exit status 1.*NameError"):
        doc_blocks.run_page(page, root=tmp_path)
