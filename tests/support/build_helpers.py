"""Shared helpers for build-side reliability tests and benchmarks: a bad-input corpus and the manifest invariant."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tokenizers import Tokenizer

import shard_loader
from shard_loader.cache.checksum import verify_file
from shard_loader.format import open_shard
from tests.support.dagster_helpers import write_jsonl

# partition key -> regex the SourceError of that partition must match (file name first, then what is wrong)
BAD_INPUTS = {
    "pq.no_text_column": r"no_text_column.parquet: no column 'text' .*columns are \['body'\]",
    "pq.nulls": r"nulls.parquet: column 'text' has a null at row 1",
    "pq.bad_utf8": r"bad_utf8.parquet: failed reading column 'text'.*(UTF-?8|utf-?8)",
    "pq.truncated": r"truncated.parquet: not a readable parquet file",
    "pq.zero_bytes": r"zero_bytes.parquet: not a readable parquet file",
    "pq.not_parquet": r"not_parquet.parquet: not a readable parquet file",
    "js.broken": r"broken.jsonl:2: not a JSON object",
    "js.empty": r"empty.jsonl: source 'js' file has no documents",
}
GOOD_INPUTS = ("pq.good", "js.fine")


def build_command(spec: Path | str, store: Path | str, workers: int = 1) -> list[str]:
    """`shard-assets build` as a user runs it, through this interpreter's CLI module."""
    return [
        *(sys.executable, "-m", "shard_assets.cli", "build"),
        *("--spec", str(spec), "--store", str(store), "--workers", str(workers)),
    ]


def write_bad_corpus(src: Path) -> None:
    """One file per entry of BAD_INPUTS, plus the good files of GOOD_INPUTS next to them."""
    src.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"body": ["no text column here"] * 3}), src / "no_text_column.parquet")
    pq.write_table(pa.table({"text": ["fine document number one", None, "three"]}), src / "nulls.parquet")
    bad_utf8 = pa.array([b"valid utf-8 text here", b"\xff\xfe broken \xc3"], pa.binary())
    pq.write_table(pa.table({"text": bad_utf8}), src / "bad_utf8.parquet")
    pq.write_table(pa.table({"text": [f"document {i} " * 20 for i in range(500)]}), src / "truncated.parquet")
    data = (src / "truncated.parquet").read_bytes()
    (src / "truncated.parquet").write_bytes(data[: len(data) // 2])
    (src / "zero_bytes.parquet").write_bytes(b"")
    (src / "not_parquet.parquet").write_text("just some text, not a parquet file at all\n" * 10)
    good = [f"a good document about item {i}, long enough to keep" for i in range(50)]
    pq.write_table(pa.table({"text": good}), src / "good.parquet")
    write_jsonl(src / "fine.jsonl", 30, seed=3)
    (src / "broken.jsonl").write_text('{"text": "first line is fine"}\n{this is not json}\n')
    (src / "empty.jsonl").write_text("")


def bad_corpus_spec(path: Path, src: Path) -> Path:
    """A spec with a parquet source 'pq' and a JSONL source 'js', both over the bad corpus in `src`."""
    path.write_text(
        f'name = "bad"\nmin_chars = 10\nval_fraction = 0.2\n[tokenizer]\nvocab_size = 300\n'
        f'[[sources]]\nname = "pq"\nuri = "{src}/*.parquet"\n'
        f'[[sources]]\nname = "js"\nuri = "{src}/*.jsonl"\nformat = "jsonl"\n'
    )
    return path


def manifest_paths(store: Path) -> list[Path]:
    """manifests/*.json and manifest.json, those that exist."""
    paths = sorted((store / "manifests").glob("*.json")) if (store / "manifests").exists() else []
    return paths + [p for p in (store / "manifest.json",) if p.exists()]


def assert_every_manifest_whole(store: Path) -> int:
    """Every manifest in the store opens and every file it names matches size and sha256; returns how many."""
    paths = manifest_paths(store)
    for path in paths:
        m = shard_loader.open_manifest(str(path)).manifest
        for ref in m.files():
            verify_file(store / ref.key, ref)
    return len(paths)


def published(store: Path) -> dict[str, dict[str, list[str]]]:
    """{partition: {split: its documents' texts}} of the live version, decoded from the shards."""
    m = shard_loader.open_manifest(str(store)).manifest
    tok = Tokenizer.from_file(str(store / m.tokenizer.file.key))
    out: dict[str, dict[str, list[str]]] = {}
    for split in ("train", "val"):
        for e in m.split(split).shards:
            shard = open_shard(e, store / e.npy.key, store / e.bin.key, m.token_dtype, m.tokenizer.vocab_size)
            docs = [shard.document(i)[:-1].tolist() for i in range(e.documents)]
            out.setdefault(e.partition, {})[split] = tok.decode_batch(docs, skip_special_tokens=False)
    return out
