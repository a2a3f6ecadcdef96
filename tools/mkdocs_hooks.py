"""MkDocs hooks: the benchmark report lives in benchmarks/ (next to what writes it), not in docs/.

`make bench` writes benchmarks/RESULTS.md and its plots there; this hook adds them to the site
as the page `benchmarks/RESULTS.md` (with the plots beside it, so its image links hold) instead
of keeping a copy in docs/ that would drift from the measured figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def on_files(files: Files, config: Any) -> Files:
    for path in [BENCHMARKS / "RESULTS.md", *sorted(BENCHMARKS.glob("*.png"))]:
        files.append(
            File(
                f"benchmarks/{path.name}",
                src_dir=str(BENCHMARKS.parent),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files
