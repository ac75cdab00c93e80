"""`shard-loader`: inspect a manifest, warm a cache, verify checksums, and measure delivery speed."""

from __future__ import annotations

import argparse
import json
import sys
import time

from .cache.verified import cached_path, ensure_local
from .cache.checksum import verify_file
from .errors import ShardLoaderError
from .format import FileRef
from .opening import OpenedManifest, open_manifest


def cmd_info(args) -> int:
    opened = open_manifest(args.url, splits=[])  # totals are in the manifest itself: no shard table is read
    m = opened.manifest
    print(f"dataset     {m.dataset}  version {m.version}  created {m.created_at}")
    print(f"tokenizer   {m.tokenizer.name} ({m.tokenizer.fingerprint}), vocab {m.tokenizer.vocab_size:,}, eod {m.tokenizer.eod_id}, {m.token_dtype}")
    for name, split in m.splits.items():
        print(f"{name:<11} {split.tokens:>15,} tokens {split.documents:>12,} documents {split.shard_count:>7,} shards {split.nbytes / 1e9:>9.3f} GB")
    if args.json:
        print(json.dumps(opened.lineage(), indent=2))
    return 0


def _files(opened: OpenedManifest, splits: list[str] | None) -> list[FileRef]:
    """The tokenizer's file, then the .npy and .bin of every shard of `splits` (default all): what fetch and verify cover."""
    m = opened.manifest
    return [m.tokenizer.file, *m.files(splits or list(m.splits))]


def cmd_fetch(args) -> int:
    opened = open_manifest(args.url, cache_dir=args.cache_dir)
    refs = _files(opened, args.split)
    cache = opened.cache_dir(args.cache_dir)
    started, total = time.perf_counter(), sum(r.size for r in refs)
    for ref in refs:
        ensure_local(opened.store, ref, cache)
    seconds = time.perf_counter() - started
    print(f"{len(refs)} files, {total / 1e9:.3f} GB verified in {cache or opened.store.url} in {seconds:.1f} s ({total / 1e6 / max(seconds, 1e-6):,.1f} MB/s)")
    return 0


def cmd_verify(args) -> int:
    opened = open_manifest(args.url, cache_dir=args.cache_dir)
    cache = opened.cache_dir(args.cache_dir)
    missing = bad = 0
    refs = _files(opened, args.split)
    started, total, done = time.perf_counter(), sum(r.size for r in refs), 0
    for i, ref in enumerate(refs, 1):
        if sys.stderr.isatty():  # a terminal sees a line redrawn in place; a pipe only the summary
            rate = done / 1e6 / max(time.perf_counter() - started, 1e-6)
            print(f"\rverifying {i}/{len(refs)} files, {done / 1e6:,.1f}/{total / 1e6:,.1f} MB, {rate:,.1f} MB/s", end="", file=sys.stderr, flush=True)
        done += ref.size
        try:
            path = opened.store.local_path(ref.key) or cached_path(cache, ref)
            if not path.exists():
                print(f"missing  {ref.key}")
                missing += 1
                continue
            verify_file(path, ref)
        except ShardLoaderError as exc:
            print(f"BAD      {exc}")
            bad += 1
    if missing and cache is not None:
        print(f"{opened.store.url} is remote: its files are verified in the cache {cache}; "
              f"run `shard-loader fetch {args.url}`{' --cache-dir ' + str(args.cache_dir) if args.cache_dir else ''} first")
    if sys.stderr.isatty():
        print(file=sys.stderr)
    seconds = time.perf_counter() - started
    summary = f"{len(refs)} files, {total / 1e9:.3f} GB in {seconds:.1f} s ({total / 1e6 / max(seconds, 1e-6):,.1f} MB/s)"
    print(f"all files verified: {summary}" if not (bad or missing) else f"{missing} files missing, {bad} bad of {summary}")
    return 1 if bad or missing else 0


def cmd_bench(args) -> int:
    from .dataset import TokenDataset

    started = time.perf_counter()
    split = args.split[0] if args.split else "train"
    ds = TokenDataset(args.url, split=split, seq_len=args.seq_len, batch_size=args.batch_size, cache_dir=args.cache_dir)  # a remote store caches by default
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


def cmd_pin(args) -> int:
    from .arguments import duration
    from .storage.reader_leases import pin

    lease, key = pin(args.url, duration("--for", args.for_), note=args.note)
    until = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(time.time() + lease.seconds))
    print(f"pinned {lease.version} until about {until} ({key}); gc keeps it until then, or until that key is deleted")
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
        p.add_argument("--cache-dir", default=None, help="where a remote dataset's files go (default: one folder per dataset under $XDG_CACHE_HOME/shard_loader or ~/.cache/shard_loader)")
        p.set_defaults(func=func)
        if name == "info":
            p.add_argument("--json", action="store_true", help="also print the lineage")
        if name == "bench":
            p.add_argument("--seq-len", type=int, default=2048)
            p.add_argument("--batch-size", type=int, default=8)
            p.add_argument("--batches", type=int, default=200)
    p = sub.add_parser("pin", help="keep a version from gc for a while (for readers that cannot write a lease of their own); needs write keys")
    p.add_argument("url", help="the version's manifest: manifests/<version>.json, or a folder or manifest.json for the live one")
    p.add_argument("--for", dest="for_", required=True, help="how long, e.g. 30d, 12h")
    p.add_argument("--note", default="", help="who pinned it and why, shown by shard-assets gc")
    p.set_defaults(func=cmd_pin)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ShardLoaderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
