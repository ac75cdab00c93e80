"""A deterministic local corpus of long documents: the Python sources installed on this machine."""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path


def source_files() -> list[Path]:
    roots = [Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])]
    files = []
    for root in roots:
        files += sorted(p for p in root.rglob("*.py") if p.is_file())
    return files


def build_corpus(out_dir: Path, megabytes: int, parts: int) -> list[Path]:
    """`parts` JSONL files holding about `megabytes` MB of text in total, one source file per document."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"part{i}.jsonl" for i in range(parts)]
    if all(p.exists() for p in paths):
        return paths
    budget, outs, i = megabytes << 20, [open(p, "w") for p in paths], 0
    for f in source_files():
        text = f.read_text(errors="replace")
        if len(text) < 2000:
            continue
        outs[i % parts].write(json.dumps({"text": text}) + "\n")
        i += 1
        budget -= len(text)
        if budget <= 0:
            break
    for o in outs:
        o.close()
    if budget > 0:
        print(f"corpus: only {(megabytes << 20) - budget:,} bytes of Python sources on this machine", file=sys.stderr)
    return paths
