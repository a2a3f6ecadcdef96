"""Counting tokens with o200k_base (the GPT-4o / GPT-5 encoding) offline.

`tiktoken` downloads its encoding files at run time, which this project cannot do. The exact
file it would download, `o200k_base.tiktoken`, ships (gzipped) in the PyPI wheel `bpe-openai`
(pinned below; its tokenizer is not used). `encoding()` downloads that wheel once with
`pip download --no-deps` into `.cache/tiktoken/` (git-ignored), puts the file where tiktoken's
cache looks for it, and lets tiktoken load it: tiktoken checks the file's SHA-256 against the
hash it pins for o200k_base, so the count is tiktoken's own, byte for byte.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

BPE_OPENAI = "0.1.4"
CACHE = Path(__file__).resolve().parent.parent / ".cache" / "tiktoken"
_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"  # tiktoken's cache key


def encoding() -> Any:
    """tiktoken's o200k_base, loaded from the cache this function fills."""
    target = CACHE / hashlib.sha1(_URL.encode()).hexdigest()
    if not target.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        wheels = sorted(CACHE.glob(f"bpe_openai-{BPE_OPENAI}-*.whl"))
        if not wheels:
            subprocess.run(
                [
                    sys.executable, "-m", "pip", "download", f"bpe-openai=={BPE_OPENAI}",
                    "--no-deps", "-q", "-d", str(CACHE),
                ],
                check=True,
            )  # fmt: skip
            wheels = sorted(CACHE.glob(f"bpe_openai-{BPE_OPENAI}-*.whl"))
        with zipfile.ZipFile(wheels[0]) as archive:
            data = gzip.decompress(archive.read("bpe_openai/data/o200k_base.tiktoken.gz"))
        target.write_bytes(data)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(CACHE)
    import tiktoken

    return tiktoken.get_encoding("o200k_base")


def count(text: str) -> int:
    """Tokens of `text` in o200k_base."""
    return len(encoding().encode(text, disallowed_special=()))
