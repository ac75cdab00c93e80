"""Tokenization, side by side in one run, one partition per process on every core:
(a) the tokenizer alone (encode_batch_fast on texts in memory: the ceiling), (b) the
tokenized-shard asset's work from raw parquet to published .npy/.bin, (c) the per-document
loop many projects write. Also (b) on one process, and peak RSS at 1x and 10x a partition."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .machine import PEAK_RSS_SNIPPET

VOCAB = 50_000


def _prepare(size, work: Path) -> tuple[Path, list[str], str]:
    """Raw partitions (the raw asset's own code) and a byte-level BPE trained on part of them."""
    from shard_assets.lib.raw_writer import write_raw_partition
    from shard_assets.lib.sources.listing import list_source_files
    from shard_assets.lib.spec import parse_spec
    from shard_assets.lib.store import LocalFolderStore
    from shard_assets.lib.spec import TokenizerSpec
    from shard_assets.lib.tokenizer import build_tokenizer

    from .corpus import build_corpus

    cores = os.cpu_count() or 1
    build_corpus(work / "corpus", size.corpus_mb, cores)
    spec = parse_spec({"name": "bench", "min_chars": 1, "sources": [{"name": "py", "uri": f"{work}/corpus/*.jsonl", "format": "jsonl"}]}, "bench")
    store = LocalFolderStore(work / "store")
    keys = []
    for f in list_source_files(spec.sources[0]):
        key = f"raw/py/{f.part}.parquet"
        if not store.exists(key):
            with tempfile.TemporaryDirectory() as tmp:
                write_raw_partition(spec, f, Path(tmp) / "r.parquet")
                store.put_file(key, Path(tmp) / "r.parquet")
        keys.append(key)
    tok_path = work / "tokenizer.json"
    if not tok_path.exists():
        texts = itertools.chain.from_iterable(_texts(store.path(k)) for k in keys)
        text, _ = build_tokenizer(TokenizerSpec(vocab_size=VOCAB, train_max_bytes=16 << 20), _capped(texts, 16 << 20))
        tok_path.write_text(text)
    return work / "store", keys, tok_path.read_text()


def _capped(texts, budget):
    for t in texts:
        yield t
        budget -= len(t)
        if budget <= 0:
            return


def _texts(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["text"]).column(0).to_pylist()


def _record(tok_json: str):
    from shard_assets.lib.tokenizer import TokenizerRecord, fingerprint_of, load_tokenizer
    from shard_loader.format import token_dtype_for

    tok = load_tokenizer(tok_json)
    vocab = tok.get_vocab_size()
    return tok, TokenizerRecord("bench", fingerprint_of(tok_json), vocab, 0, token_dtype_for(vocab))


def _ceiling(args) -> tuple[int, float]:
    store, key, tok_json = args
    from shard_assets.lib.encoding import by_size

    tok, _ = _record(tok_json)
    texts = _texts(Path(store) / key)
    started, n = time.perf_counter(), 0
    for chunk in by_size(texts):  # the same batches the asset encodes
        n += sum(len(e.ids) for e in tok.encode_batch_fast(texts[chunk], add_special_tokens=False))
    return n, time.perf_counter() - started


def _asset(args) -> tuple[int, float]:
    store, key, tok_json = args
    from shard_assets.assets.tokenized import tokenize_and_publish
    from shard_assets.lib.store import LocalFolderStore

    tok, record = _record(tok_json)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        shards, _, _ = tokenize_and_publish(LocalFolderStore(store), key, tok, record, Path(key).stem, 0.01, 1000, Path(tmp))
    return sum(s["tokens"] - s["documents"] for s in shards.values()), time.perf_counter() - started


def _loop(args) -> tuple[int, float]:
    store, key, tok_json = args
    tok, record = _record(tok_json)
    texts = _texts(Path(store) / key)
    started = time.perf_counter()
    tokens = []
    for doc in texts:
        tokens.extend(tok.encode(doc, add_special_tokens=False).ids)
        tokens.append(record.eod_id)
    with tempfile.TemporaryDirectory() as tmp:
        np.array(tokens, dtype=record.token_dtype).tofile(Path(tmp) / "tokens.bin")
    return len(tokens) - len(texts), time.perf_counter() - started


def _parallel(fn, jobs: list) -> dict:
    """Run one job per process at once; tokens per second per core over the slowest process's time."""
    ctx = multiprocessing.get_context("spawn")
    previous = os.environ.get("RAYON_NUM_THREADS")
    os.environ["RAYON_NUM_THREADS"] = "1"  # one core per process: the tokenizer's own thread pool stays out of the way
    try:
        with ctx.Pool(len(jobs)) as pool:
            started = time.perf_counter()
            out = pool.map(fn, jobs)
            wall = time.perf_counter() - started
    finally:
        os.environ.pop("RAYON_NUM_THREADS") if previous is None else os.environ.__setitem__("RAYON_NUM_THREADS", previous)
    tokens = sum(n for n, _ in out)
    return {"processes": len(jobs), "tokens": tokens, "wall_s": round(wall, 2), "per_core_tokens_per_s": tokens / max(s for _, s in out) / len(jobs)}


RSS = """
import sys, tempfile
from pathlib import Path
from benchmarks.bench_tokenize import _record
from shard_assets.lib.encoding import tokenize_partition
tok, record = _record(Path(sys.argv[2]).read_text())
with tempfile.TemporaryDirectory() as tmp:
    tokenize_partition(Path(sys.argv[1]), tok, 0, record.token_dtype, 0.01, Path(tmp), "p")
""" + f"print({PEAK_RSS_SNIPPET})\n"


def _rss(raw: Path, work: Path, repeat: int) -> int:
    import pyarrow.parquet as pq

    table = pq.read_table(raw)
    path = work / f"rss-{repeat}x.parquet"
    with pq.ParquetWriter(path, table.schema, compression="zstd") as w:
        for _ in range(repeat):
            w.write_table(table, 2000)
    out = subprocess.run([sys.executable, "-c", RSS, str(path), str(work / "tokenizer.json")], capture_output=True, text=True, check=True,
                         env={**os.environ, "RAYON_NUM_THREADS": "1"}, cwd=Path(__file__).resolve().parents[1])
    return int(out.stdout.split()[-1])


def run(size, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    store, keys, tok_json = _prepare(size, work)
    jobs = [(str(store), k, tok_json) for k in keys]
    ceiling, asset, loop = _parallel(_ceiling, jobs), _parallel(_asset, jobs), _parallel(_loop, jobs)
    single, single_ceiling = _parallel(_asset, jobs[:1]), _parallel(_ceiling, jobs[:1])
    rss1, rss10 = _rss(store / keys[0], work, 1), _rss(store / keys[0], work, 10)
    a, b, c = (x["per_core_tokens_per_s"] for x in (ceiling, asset, loop))
    vocab = _record(tok_json)[1].vocab_size
    return {
        "corpus_mb": size.corpus_mb,
        "vocab_size": vocab,
        "a_tokenizer_alone": ceiling,
        "b_asset": asset,
        "c_per_document_loop": loop,
        "b_asset_one_process": single,
        "a_tokenizer_alone_one_process": single_ceiling,
        "peak_rss_1x_bytes": rss1,
        "peak_rss_10x_bytes": rss10,
        "summary": [
            {"figure": "(a) tokenizer alone, tokens/s per core", "value": f"{a / 1e6:.3f}M ({ceiling['processes']} processes, vocab {vocab:,})"},
            {"figure": "(b) tokenized-shard asset, tokens/s per core", "value": f"{b / 1e6:.3f}M = {b / a:.2f} of (a), {b / c:.2f}x (c)", "target": ">= 0.9 of (a)"},
            {"figure": "(c) per-document loop, tokens/s per core", "value": f"{c / 1e6:.3f}M"},
            {"figure": "(b) on every core / (c) per core", "value": f"{b * asset['processes'] / c:.2f}x", "target": f"about {0.9 * asset['processes']:.1f}x"},
            {"figure": "(b) per core, 1 vs all processes", "value": f"{single['per_core_tokens_per_s'] / 1e6:.3f}M vs {b / 1e6:.3f}M ({b / single['per_core_tokens_per_s']:.2f})", "target": "within 10%"},
            {"figure": "(a) per core, 1 vs all processes (the machine's own scaling)", "value": f"{single_ceiling['per_core_tokens_per_s'] / 1e6:.3f}M vs {a / 1e6:.3f}M ({a / single_ceiling['per_core_tokens_per_s']:.2f})"},
            {"figure": "peak RSS tokenizing 1x / 10x a partition", "value": f"{rss1 / 2**20:.0f} MiB / {rss10 / 2**20:.0f} MiB", "target": "flat"},
        ],
    }
