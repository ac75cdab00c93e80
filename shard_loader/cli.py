"""`shard-loader`: inspect a manifest, warm a cache, verify checksums, and measure delivery speed."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .cache import cached_path, ensure_local
from .checksum import verify_file
from .errors import ShardLoaderError
from .opening import open_manifest


def cmd_info(args) -> int:
    m = open_manifest(args.url).manifest
    print(f"dataset     {m.dataset}  version {m.version}  created {m.created_at}")
    print(f"tokenizer   {m.tokenizer.name} ({m.tokenizer.fingerprint}), vocab {m.tokenizer.vocab_size:,}, eod {m.tokenizer.eod_id}, {m.token_dtype}")
    for name, split in m.splits.items():
        size = sum(e.nbytes for e in split.shards)
        print(f"{name:<11} {split.tokens:>15,} tokens {split.documents:>12,} documents {len(split.shards):>7,} shards {size / 1e9:>9.3f} GB")
    if args.json:
        print(json.dumps(m.to_json()["lineage"], indent=2))
    return 0


def cmd_fetch(args) -> int:
    opened = open_manifest(args.url)
    refs = opened.manifest.files(args.split or list(opened.manifest.splits))
    started, total = time.perf_counter(), sum(r.size for r in refs)
    for ref in refs:
        ensure_local(opened.store, ref, args.cache_dir)
    seconds = time.perf_counter() - started
    print(f"{len(refs)} files, {total / 1e9:.3f} GB verified in {args.cache_dir or opened.store.url} in {seconds:.1f} s")
    return 0


def cmd_verify(args) -> int:
    opened = open_manifest(args.url)
    bad = 0
    for ref in opened.manifest.files(args.split or list(opened.manifest.splits)):
        path = opened.store.local_path(ref.key) or (cached_path(args.cache_dir, ref) if args.cache_dir else None)
        if path is None or not Path(path).exists():
            print(f"missing  {ref.key}")
            bad += 1
            continue
        try:
            verify_file(path, ref)
        except ShardLoaderError as exc:
            print(f"BAD      {exc}")
            bad += 1
    print("all files verified" if not bad else f"{bad} files missing or bad")
    return 1 if bad else 0


def cmd_bench(args) -> int:
    from .dataset import TokenDataset

    started = time.perf_counter()
    ds = TokenDataset(args.url, split=args.split[0] if args.split else "train", seq_len=args.seq_len, batch_size=args.batch_size, cache_dir=args.cache_dir)
    first, tokens = None, 0
    for i, batch in enumerate(ds):
        if first is None:
            first = time.perf_counter() - started
        tokens += batch["input_ids"].size
        if i + 1 >= args.batches:
            break
    seconds = time.perf_counter() - started - (first or 0)
    print(f"first batch after {first:.3f} s; {tokens:,} tokens in {seconds:.3f} s = {tokens / max(seconds, 1e-9) / 1e6:,.1f}M tokens/s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shard-loader", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, help_ in (
        ("info", cmd_info, "summarise a manifest"),
        ("fetch", cmd_fetch, "download and verify shards into a cache"),
        ("verify", cmd_verify, "check sizes and sha256 of local or cached files"),
        ("bench", cmd_bench, "measure tokens per second delivered as batches"),
    ):
        p = sub.add_parser(name, help=help_)
        p.add_argument("url", help="manifest path or URL (a folder means its manifest.json)")
        p.add_argument("--split", action="append", help="split(s) to use (default: all; bench: train)")
        p.add_argument("--cache-dir", default=None)
        p.set_defaults(func=func)
        if name == "info":
            p.add_argument("--json", action="store_true", help="also print the lineage")
        if name == "bench":
            p.add_argument("--seq-len", type=int, default=2048)
            p.add_argument("--batch-size", type=int, default=8)
            p.add_argument("--batches", type=int, default=200)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ShardLoaderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
