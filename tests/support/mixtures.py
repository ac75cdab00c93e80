"""Datasets for mixture tests, built by the project from three kinds of source (JSONL prose, plain-text code,
parquet arithmetic, the last about 100x smaller) with one shared `kind = "file"` tokenizer, each into its own
store prefix; and a fourth with another tokenizer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from shard_assets.lib.spec import load_spec
from shard_assets.lib.tokenizer import train_bpe
from shard_assets.runner import build_dataset
from tests.support.dagster_helpers import WORDS, tiny_resources, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER_BLOCK = '[tokenizer]\nkind = "file"\npath = "../tokenizers/tokenizer.json"\n'
WEIGHTS = {"web": 0.6, "code": 0.3, "math": 0.1}


def code_documents(n: int, seed: int) -> list[str]:
    return [
        (
            f"def f_{seed}_{i}(x, y):\n    total = x * {i} + y * {seed + 3}\n"
            f"    return [total, {i % 7}, '{WORDS[i % len(WORDS)]}']\n"
        )
        for i in range(n)
    ]


def math_documents(n: int) -> list[str]:
    return [f"Lemma {i}: {i} + {i + 2} = {2 * i + 2}; hence {i} * 3 = {3 * i}." for i in range(n)]


def write_tokenizer(path: Path, vocab_size: int = 300, seed: int = 0) -> Path:
    """A byte-level BPE trained on a little of each kind of text, as one tokenizer.json file."""
    texts = [f"Document {seed}: " + " ".join(WORDS[(seed + j) % len(WORDS)] for j in range(30)) for _ in range(20)]
    texts += code_documents(20, seed) + math_documents(20)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(train_bpe(texts, vocab_size, "<|endoftext|>").to_str())
    return path


SOURCES = {
    "web": '[[sources]]\nname = "pages"\nuri = "../sources/web/*.jsonl"\nformat = "jsonl"\n',
    "code": (
        '[[sources]]\nname = "repos"\nuri = "../sources/code/*.txt"\nformat = "text"\ndocument_separator = "\\n\\n"\n'
    ),
    "math": '[[sources]]\nname = "lemmas"\nuri = "../sources/math/*.parquet"\n',
}


def write_sources(root: Path) -> None:
    """web: 2 JSONL files of prose; code: 2 text files of functions; math: one parquet file of 6 short lemmas."""
    for folder in ("web", "code", "math"):
        (root / "sources" / folder).mkdir(parents=True, exist_ok=True)
    for i in range(2):
        write_jsonl(root / "sources/web" / f"pages{i}.jsonl", 70, seed=i)
        (root / "sources/code" / f"repo{i}.txt").write_text("\n\n".join(code_documents(120, seed=i)))
    pq.write_table(pa.table({"text": math_documents(6)}), root / "sources/math/lemmas.parquet")


def write_dataset_spec(
    root: Path, name: str, source: str | None = None, tokenizer_block: str = TOKENIZER_BLOCK
) -> Path:
    """specs/<name>.toml over SOURCES[source or name]; its tokenizer path is relative to the specs folder."""
    spec = root / "specs" / f"{name}.toml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(
        f'name = "{name}"\nval_fraction = 0.25\nmin_chars = 10\n\n{tokenizer_block}\n{SOURCES[source or name]}'
    )
    return spec


def build(root: Path, name: str, store: Path | None = None) -> Path:
    """Build one dataset with the runner (the defined jobs as Dagster runs) into `store` (default store/<name>)."""
    spec = root / "specs" / f"{name}.toml"
    store = store or root / "store" / name
    with dg.DagsterInstance.ephemeral() as instance:
        result = build_dataset(instance, load_spec(spec), tiny_resources(spec, store))
    assert all(result.checks.values()), result.checks
    return store


def build_corpus(
    root: Path, names: tuple[str, ...] = ("web", "code", "math", "other"), tokenizer_block: str = TOKENIZER_BLOCK
) -> dict[str, Path]:
    """web, code and math with the shared tokenizer file (tokenizers/tokenizer.json, named by `tokenizer_block`), and
    `other` (web's sources) with another tokenizer file; each built into store/<name>."""
    write_tokenizer(root / "tokenizers" / "tokenizer.json")
    write_tokenizer(root / "tokenizers" / "other.json", vocab_size=280, seed=5)
    write_sources(root)
    for name in names:
        block = tokenizer_block.replace("tokenizer.json", "other.json") if name == "other" else tokenizer_block
        write_dataset_spec(root, name, source="web" if name == "other" else None, tokenizer_block=block)
    return {name: build(root, name) for name in names}


def live_manifest(store: Path) -> dict:
    return json.loads((store / "manifest.json").read_text())


def dagster_home(tmp: Path) -> Path:
    home = tmp / "dagster_home"
    home.mkdir(exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").symlink_to(ROOT / "dagster.yaml")
    return home


def shard_assets(
    args: list[str], cwd: Path, home: Path, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """The `shard-assets` command in a subprocess, as a user runs it (with `env` added to this environment)."""
    env = {**os.environ, "DAGSTER_HOME": str(home), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "shard_assets.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def blend_spec(budget: int, weights: dict = WEIGHTS, math_cap: float | None = None) -> str:
    """web by its live manifest.json, code by its folder, math pinned to its current manifests/<version>.json."""
    lines = [f'name = "blend"\ntokens_per_epoch = {budget}\n']
    for name, weight in weights.items():
        url = {
            "web": "../store/web/manifest.json",
            "code": "../store/code",
            "math": "../store/math/manifests/{math}.json",
            "other": "../store/other/manifest.json",
        }[name]
        lines.append(
            f'[[components]]\nmanifest = "{url}"\nweight = {weight}\n'
            + (f"max_repeats = {math_cap}\n" if name == "math" and math_cap else "")
        )
    return "".join(lines)


def mix(root: Path, body: str, name: str = "blend") -> subprocess.CompletedProcess:
    """`shard-assets mix` of `body` (its {math} filled with math's live version) as mixtures/<name>.toml under root,
    into root/store."""
    spec = root / "mixtures" / f"{name}.toml"
    spec.parent.mkdir(exist_ok=True)
    spec.write_text(body.replace("{math}", live_manifest(root / "store/math")["dataset"]["version"]))
    return shard_assets(["mix", "--spec", str(spec), "--store", str(root / "store")], cwd=root, home=dagster_home(root))
