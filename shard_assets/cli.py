"""`shard-assets`: build the dataset end to end, list corpus presets, plan and discover sources."""

from __future__ import annotations

import argparse
import os
import sys
import time

from .catalog import format_catalog


def _resources(args) -> dict:
    """The spec from --spec; the store from the environment (see resources.py), --store overriding its root."""
    from .resources import DatasetResource, store_resource_from_env

    if args.store:
        os.environ["DATASET_STORE_ROOT"] = args.store
        if args.store.startswith(("s3://", "r2://")) and os.environ.get("DATASET_STORE") != "r2":
            os.environ["DATASET_STORE"] = "s3"
    return {"dataset": DatasetResource(spec_path=args.spec or ""), "store": store_resource_from_env()}


def cmd_build(args) -> int:
    from shard_loader import iter_sequences

    from .build import build_dataset
    from .instance import local_instance
    from .spec import load_spec

    spec = load_spec(args.spec or None)
    instance = local_instance()
    resources = _resources(args)
    print(f"building dataset {spec.name!r} into {resources['store'].root} (Dagster home {os.environ['DAGSTER_HOME']})", flush=True)
    result = build_dataset(instance, spec, resources, workers=args.workers)
    started = time.perf_counter()
    batch = next(iter_sequences(result.manifest_url, "train", seq_len=args.seq_len, batch_size=args.batch_size))
    read_ms = (time.perf_counter() - started) * 1000
    print(f"manifest      {result.manifest_url}")
    print(f"version       {result.version}")
    print(f"partitions    {result.partitions} ({len(result.run_ids)} Dagster runs)")
    for split in ("train", "val"):
        print(f"{split:<13} {result.tokens[split]:>12,} tokens  {result.documents[split]:>9,} documents")
    failed = sorted(name for name, passed in result.checks.items() if not passed)
    print(f"checks        {len(result.checks) - len(failed)} of {len(result.checks)} passed" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    print(f"build time    {result.seconds:.1f} s")
    print(
        f"first batch   input_ids {batch['input_ids'].shape} {batch['input_ids'].dtype}, "
        f"labels {batch['labels'].shape}, read in {read_ms:.0f} ms: {batch['input_ids'][0, :8].tolist()} ..."
    )
    return 0


def cmd_presets(args) -> int:
    print(format_catalog())
    return 0


def cmd_plan(args) -> int:
    from .plan import format_plan, plan_build
    from .spec import load_spec
    from .tokenizer import build_tokenizer, load_tokenizer

    spec = load_spec(args.spec or None)
    text, record = build_tokenizer(spec.tokenizer, _sample_texts(spec))  # a pretrained one, or a BPE trained on a sample
    plan = plan_build(spec, load_tokenizer(text), record.token_dtype, args.sample)
    print(format_plan(plan))
    return 0


def _sample_texts(spec, budget: int = 4 << 20):
    """A few MB of the first source's documents, to train a stand-in BPE when no tokenizer exists yet."""
    from .sources.listing import list_source_files
    from .sources.readers import iter_document_batches

    source = spec.sources[0]
    for file in list_source_files(source):
        for batch in iter_document_batches(source, file, 1000):
            for doc in batch:
                yield doc
                budget -= len(doc)
                if budget <= 0:
                    return


def cmd_discover(args) -> int:
    from .build import register_partitions
    from .instance import local_instance
    from .spec import load_spec

    keys = register_partitions(local_instance(), load_spec(args.spec or None))
    print("\n".join(keys))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shard-assets", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--spec", default=os.environ.get("SHARD_DATASET_SPEC", ""), help="dataset spec TOML (default: the built-in demo)")
    common.add_argument("--store", default=None, help="dataset root: a folder or s3://bucket/prefix (default: from the environment, else data/store)")
    b = sub.add_parser("build", parents=[common], help="materialise every asset end to end and read a first batch back")
    b.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="partitions processed at once")
    b.add_argument("--seq-len", type=int, default=128)
    b.add_argument("--batch-size", type=int, default=4)
    b.set_defaults(func=cmd_build)
    sub.add_parser("presets", help="list the named corpus presets").set_defaults(func=cmd_presets)
    p = sub.add_parser("plan", parents=[common], help="estimate tokens, bytes, disk and time from a sample of every file")
    p.add_argument("--sample", type=int, default=200, help="documents sampled per file")
    p.set_defaults(func=cmd_plan)
    sub.add_parser("discover", parents=[common], help="register a partition per source file").set_defaults(func=cmd_discover)
    args = parser.parse_args(argv)
    from .errors import BuildError

    try:
        return args.func(args)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
