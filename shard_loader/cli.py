"""`shard-loader`: inspect a manifest, warm a cache, verify checksums, and measure delivery speed."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .arguments import ArgumentError
from .cache.checksum import verify_file
from .cache.files import CachePath
from .cache.verified import cached_path, ensure_local
from .errors import ManifestError, MissingFileError, ShardLoaderError, StoreError
from .format import FileRef, open_shard
from .format.tokenizer_file import tokenizer_file_problem
from .mixture.info import describe
from .mixture.opening import OpenedMixture, component_cache_dir, is_mixture, open_components, open_mixture
from .opening import OpenedManifest, open_manifest


def _known(opened: OpenedManifest, args: argparse.Namespace) -> OpenedManifest:
    for name in args.split or []:
        opened.manifest.split(name)  # refuses an unknown split, naming the known ones
    return opened


def _open(args: argparse.Namespace) -> OpenedManifest:
    """The manifest with every split's shard table read and checked (a key in two splits is refused), and the splits
    named by --split known to it."""
    return _known(open_manifest(args.url, cache_dir=args.cache_dir), args)


def _mixture(args: argparse.Namespace) -> OpenedMixture:
    """The mixture at the URL, each split it would serve (--split, default all) checked by the loader's own check."""
    opened = open_mixture(args.url)
    for name in args.split or opened.file.tokens_per_epoch:
        opened.file.epoch_tokens(name, args.url)
    return opened


def _sources(args: argparse.Namespace) -> list[tuple[str, OpenedManifest, Path | None]]:
    """(label, opened manifest, cache) of the dataset at the URL, or of each component of a mixture (in its own folder
    under --cache-dir, as the loader keeps it), every split's table read and the splits named by --split known."""
    if is_mixture(args.url):
        mixture = _mixture(args)
        components = open_components(mixture, cache_dir=args.cache_dir)
        caches = [
            component_cache_dir(args.cache_dir, c.name) if args.cache_dir else None for c in mixture.file.components
        ]
        return [
            (f"{c.name}: ", _known(m, args), m.cache_dir(d))
            for c, m, d in zip(mixture.file.components, components, caches)
        ]
    opened = _open(args)
    return [("", opened, opened.cache_dir(args.cache_dir))]


def _splits(opened: OpenedManifest, args: argparse.Namespace) -> list[str]:
    return list(dict.fromkeys(args.split)) if args.split else list(opened.manifest.splits)


def cmd_info(args: argparse.Namespace) -> int:
    if is_mixture(args.url):
        print(describe(_mixture(args), as_json=args.json))
        return 0
    opened = _open(args)
    m = opened.manifest
    print(f"dataset     {m.dataset}  version {m.version}  created {m.created_at}")
    print(
        f"tokenizer   {m.tokenizer.name} ({m.tokenizer.fingerprint}), vocab {m.tokenizer.vocab_size:,}, eod "
        f"{m.tokenizer.eod_id}, {m.token_dtype}"
    )
    for name in _splits(opened, args):
        split = m.splits[name]
        print(
            f"{name:<11} {split.tokens:>15,} tokens {split.documents:>12,} documents {split.shard_count:>7,} shards "
            f"{split.nbytes / 1e9:>9.3f} GB"
        )
    if args.json:
        print(json.dumps(opened.lineage(), indent=2))
    return 0


def _files(opened: OpenedManifest, args: argparse.Namespace) -> list[FileRef]:
    """What fetch and verify cover: the tokenizer's file, the shard tables and the lineage file, then the .npy and .bin
    of every shard of the splits named by --split (default all)."""
    m = opened.manifest
    return [m.tokenizer.file, *m.sidecars(), *m.files(_splits(opened, args))]


def cmd_fetch(args: argparse.Namespace) -> int:
    for label, opened, cache in _sources(args):
        refs = _files(opened, args)
        started, total = time.perf_counter(), sum(r.size for r in refs)
        for ref in refs:
            ensure_local(opened.store, ref, cache)
        seconds = time.perf_counter() - started
        print(
            f"{label}{len(refs)} files, {total / 1e9:.3f} GB verified in {cache or opened.store.url} in {seconds:.1f} "
            f"s ({total / 1e6 / max(seconds, 1e-6):,.1f} MB/s)"
        )
    return 0


def _where(opened: OpenedManifest, cache: Path | None, ref: FileRef) -> Path | CachePath:
    """Where a file the manifest names is checked: in place in a local store, else in the cache."""
    local = opened.store.local_path(ref.key)
    if local is not None:
        return local
    if cache is None:
        raise StoreError(f"{opened.store.url} is remote: pass --cache-dir to say where its files were fetched")
    return cached_path(cache, ref)


def cmd_verify(args: argparse.Namespace) -> int:
    failed = [_verify(args, label, opened, cache) for label, opened, cache in _sources(args)]
    return 1 if any(failed) else 0


def _refused(
    opened: OpenedManifest, cache: Path | None, args: argparse.Namespace, failed: set[str]
) -> list[ShardLoaderError]:
    """The loader's checks of the files that verified, the error of each that fails: the tokenizer file against the
    manifest's vocab_size and eod_id; each shard's token count and offsets against its table row, as when it maps the
    shard (a row whose count its files do not hold, 0 tokens for a shard that has some, is refused here as there), and
    its ids below vocab_size, as when it fills a batch (a full scan: verify reads every byte anyway)."""
    m, errors = opened.manifest, list[ShardLoaderError]()
    if m.tokenizer.file.key not in failed:
        tokenizer = _plain(_where(opened, cache, m.tokenizer.file)).read_bytes()
        if problem := tokenizer_file_problem(tokenizer, m.tokenizer):
            errors.append(ManifestError(problem))
    for name in _splits(opened, args):
        for entry in m.split(name).shards:
            if entry.npy.key in failed or entry.bin.key in failed:
                continue
            npy, bin_ = (_where(opened, cache, ref) for ref in (entry.npy, entry.bin))
            try:
                open_shard(entry, _plain(npy), _plain(bin_), m.token_dtype, m.tokenizer.vocab_size)
            except ShardLoaderError as exc:
                errors.append(exc)
    return errors


def _plain(path: Path | CachePath) -> Path:
    return path.path if isinstance(path, CachePath) else path


def _verify(args: argparse.Namespace, label: str, opened: OpenedManifest, cache: Path | None) -> bool:
    """Check one dataset's files (`label` names a mixture's component); True if any is missing or bad."""
    missing = bad = 0
    refs, failed = _files(opened, args), set[str]()
    started, total, done = time.perf_counter(), sum(r.size for r in refs), 0
    for i, ref in enumerate(refs, 1):
        if sys.stderr.isatty():  # a terminal sees a line redrawn in place; a pipe only the summary
            rate, mb = done / 1e6 / max(time.perf_counter() - started, 1e-6), f"{done / 1e6:,.1f}/{total / 1e6:,.1f} MB"
            line = f"\r{label}verifying {i}/{len(refs)} files, {mb}, {rate:,.1f} MB/s"
            print(line, end="", file=sys.stderr, flush=True)
        done += ref.size
        try:
            verify_file(_where(opened, cache, ref), ref)
        except MissingFileError:
            print(f"{label}missing  {ref.key}")
            missing += 1
            failed.add(ref.key)
        except ShardLoaderError as exc:
            print(f"{label}BAD      {exc}")
            bad += 1
            failed.add(ref.key)
    for error in _refused(opened, cache, args, failed):
        print(f"{label}BAD      {error}")
        bad += 1
    if missing and cache is not None:
        print(
            f"{label}{opened.store.url} is remote: its files are verified in the cache {cache}; "
            f"run `shard-loader fetch {args.url}`{' --cache-dir ' + str(args.cache_dir) if args.cache_dir else ''} "
            "first"
        )
    if sys.stderr.isatty():
        print(file=sys.stderr)
    seconds = time.perf_counter() - started
    rate = total / 1e6 / max(seconds, 1e-6)
    summary = f"{len(refs)} files, {total / 1e9:.3f} GB in {seconds:.1f} s ({rate:,.1f} MB/s)"
    verdict = f"{missing} files missing, {bad} bad of" if bad or missing else "all files verified:"
    print(f"{label}{verdict} {summary}")
    return bool(bad or missing)


def cmd_bench(args: argparse.Namespace) -> int:
    from .dataset import TokenDataset

    started = time.perf_counter()
    if args.split and len(args.split) > 1:
        raise ArgumentError(f"bench measures one split; --split names {len(args.split)} ({', '.join(args.split)})")
    split = args.split[0] if args.split else "train"
    # a remote store caches by default
    ds = TokenDataset(args.url, split=split, seq_len=args.seq_len, batch_size=args.batch_size, cache_dir=args.cache_dir)
    first, tokens = None, 0
    for i, batch in enumerate(ds):
        if first is None:
            first = time.perf_counter() - started
        tokens += batch["input_ids"].size
        if i + 1 >= args.batches:
            break
    seconds = time.perf_counter() - started - (first or 0)
    print(
        f"first batch after {first:.3f} s; {tokens:,} tokens in {seconds:.3f} s = "
        f"{tokens / max(seconds, 1e-9) / 1e6:,.1f}M tokens/s"
    )
    return 0


def cmd_pin(args: argparse.Namespace) -> int:
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
        p.add_argument("url", help="manifest or mixture path or URL (a folder means its manifest.json)")
        p.add_argument("--split", action="append", help="split(s) to use (default: all; bench: train)")
        p.add_argument(
            "--cache-dir",
            default=None,
            help="where a remote dataset's files go (default: one folder per dataset under "
            "$XDG_CACHE_HOME/shard_loader or ~/.cache/shard_loader)",
        )
        p.set_defaults(func=func)
        if name == "info":
            p.add_argument("--json", action="store_true", help="also print the lineage")
        if name == "bench":
            p.add_argument("--seq-len", type=int, default=2048)
            p.add_argument("--batch-size", type=int, default=8)
            p.add_argument("--batches", type=int, default=200)
    p = sub.add_parser(
        "pin",
        help="keep a version from gc for a while (for readers that cannot write a lease of their own); needs write "
        "keys",
    )
    p.add_argument(
        "url", help="the version's manifest: manifests/<version>.json, or a folder or manifest.json for the live one"
    )
    p.add_argument("--for", dest="for_", required=True, help="how long, e.g. 30d, 12h")
    p.add_argument("--note", default="", help="who pinned it and why, shown by shard-assets gc")
    p.set_defaults(func=cmd_pin)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except ShardLoaderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
