"""`shard-assets`: write the demo, plan, discover and build a dataset, list corpus presets.

One error boundary: every BuildError or ShardLoaderError, and every argument error, prints `error: ...` on one line
and exits 2; `--debug` prints the traceback instead. Arguments, settings and the spec are checked before Dagster is
imported (seconds on a busy machine), so a mistake is refused at once."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

from .lib.errors import BuildError, SettingsError
from .lib.presets import format_catalog
from .lib.settings import DEFAULT_SPEC, PROJECT_ROOT_VARIABLE, StoreChoice, local_folder, mixture_specs_folder
from .lib.settings import project_root, store_choice

if TYPE_CHECKING:
    from .defs.resources import Settings, StoreResource
    from .lib.spec import DatasetSpec
    from .lib.store.s3 import S3ObjectStore


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (`error: ...`, exit 2), as every other error of the CLI."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message}; see `{self.prog} --help`\n")


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _spec(args: argparse.Namespace) -> DatasetSpec:
    """The dataset spec from --spec over the environment, read and checked with the store's settings before Dagster
    is imported; outside the project folder a missing demo spec (the default, or given as data/demo/demo.toml) says so,
    naming the folder, rather than offer to write a demo there."""
    path = Path(store_choice(spec=args.spec, store=args.store).spec_path)
    from .lib.spec import load_spec

    project = project_root()
    default = path.as_posix().endswith(DEFAULT_SPEC)  # given or not: relative, it was looked for in this folder
    if default and not path.exists() and not (project / "workspace.yaml").is_file():
        raise SettingsError(
            f"{path}: dataset spec file not found, and {project} is not the project folder (no workspace.yaml); run "
            "shard-assets from the project folder, or pass --spec with the spec file's full path"
        )
    return load_spec(path)


def _port(value: str) -> int:
    n = _positive(value)
    if n > 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is 1 to 65535, got {n}")
    return n


def _settings(args: argparse.Namespace) -> Settings:
    """The spec from --spec and the store from --store over the environment (defs/resources.py), resolved to
    absolute locations here, before anything changes directory; invalid settings are one-line errors."""
    from .defs.resources import settings_from_env

    return settings_from_env(spec=args.spec, store=args.store)


def cmd_demo(args: argparse.Namespace) -> int:
    from .lib.demo import write_demo

    spec = write_demo(local_folder(args.folder, "--folder"))
    print(f"wrote the demo corpus and spec: {spec}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    spec = _spec(args)
    if spec.decontaminate is not None:  # an eval glob matching nothing, an unreadable eval file: before any write
        from .lib.curation.decontamination import build_eval_index

        build_eval_index(spec)
    from shard_loader.builder_api import default_cache_dir, iter_sequences

    from .instance import local_instance
    from .runner import build_dataset

    settings = _settings(args)
    resources = settings.resources()
    instance = local_instance(spec.name)
    print(
        f"building dataset {spec.name!r} into {settings.store_root} (Dagster home {instance.root_directory})",
        flush=True,
    )
    result = build_dataset(instance, spec, resources, workers=args.workers)
    print(f"manifest      {result.manifest_url}")
    print(f"version       {result.version}")
    print(f"partitions    {result.partitions} ({result.left_out} left out; {len(result.run_ids)} Dagster runs)")
    for split in ("train", "val"):
        print(f"{split:<13} {result.tokens[split]:>12,} tokens  {result.documents[split]:>9,} documents")
    print(_passed("checks", len(result.checks), sorted(name for name, ok in result.checks.items() if not ok)))
    print(f"build time    {result.seconds:.1f} s")
    if result.failed_runs:
        print(
            f"failed runs   {len(result.failed_runs)} (each named above); the version leaves their partitions out",
            file=sys.stderr,
        )
    started = time.perf_counter()
    options: dict[str, Any] = {}
    if "://" in result.manifest_url:  # a remote manifest URL is an S3ObjectStore's (a local folder's is a path)
        store = cast("S3ObjectStore", cast("StoreResource", resources["store"]).store())
        cache_dir = args.cache_dir or default_cache_dir(result.manifest_url)
        options = {"store_options": {"client": store.client}, "cache_dir": cache_dir}
    batch = next(
        iter_sequences(result.manifest_url, "train", seq_len=args.seq_len, batch_size=args.batch_size, **options)
    )
    read_ms = (time.perf_counter() - started) * 1000
    print(
        f"first batch   input_ids {batch['input_ids'].shape} {batch['input_ids'].dtype}, "
        f"labels {batch['labels'].shape}, read in {read_ms:.0f} ms: {batch['input_ids'][0, :8].tolist()} ..."
    )
    return 2 if result.failed_runs else 0


def _passed(label: str, total: int, failed: list[str]) -> str:
    """A summary line: how many of `total` checks passed, and the names of those that failed."""
    return f"{label:<14}{total - len(failed)} of {total} passed" + (f"; FAILED: {', '.join(failed)}" if failed else "")


def cmd_mix(args: argparse.Namespace) -> int:
    from .lib.mixture.spec import load_mixture_spec

    spec = load_mixture_spec(args.spec)  # a bad spec is one line before any run
    store_choice(store=args.store)  # --spec names the mixture spec here, not a dataset's
    from .defs.resources import settings_from_env
    from .instance import local_instance
    from .lib.mixture.summary import SPLIT, text_table
    from .mixing import publish_mixture_spec, refusal

    settings = settings_from_env(store=args.store)
    instance = local_instance(_ui_dataset())  # recorded where `shard-assets dev` shows it
    print(
        f"publishing mixture {spec.name!r} into {settings.store_root} (Dagster home {instance.root_directory})",
        flush=True,
    )
    result = publish_mixture_spec(instance, Path(args.spec), settings.resources())
    m, report = result.mixture, result.report
    print(f"mixture       {result.url}{'' if report.live else '  (NOT replaced: audits failed)'}")
    print(
        f"version       {m.version} ({'newly written' if report.created else 'already written'}; run {result.run_id})"
    )
    print(f"tokenizer     {m.tokenizer.fingerprint} (vocab {m.tokenizer.vocab_size:,}, {m.tokenizer.token_dtype})")
    how = m.lineage.get("tokens_per_epoch_from", {})
    per_split = (f"{split} {tokens:,} ({how.get(split, '?')})" for split, tokens in m.tokens_per_epoch.items())
    print("tokens/epoch  " + ", ".join(per_split))
    print(text_table(m.summary(SPLIT)))
    print(_passed("audits", len(report.audits), report.failed))
    print(f"publish time  {result.seconds:.1f} s", flush=True)
    if report.failed:
        raise refusal(result)
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    print(format_catalog())
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    spec = _spec(args)
    from .lib.plan import format_plan, plan_build
    from .lib.tokenizer import build_tokenizer, load_tokenizer

    # a pretrained tokenizer, or a BPE trained on a sample
    text, record = build_tokenizer(spec.tokenizer, _sample_texts(spec))
    plan = plan_build(spec, load_tokenizer(text), record.token_dtype, args.sample)
    print(format_plan(plan))
    return 0


def _sample_texts(spec: DatasetSpec, budget: int = 4 << 20) -> Iterator[str]:
    """A few MB of the first source's documents, to train a stand-in BPE when no tokenizer exists yet; files that
    cannot be read are passed over (the plan lists them)."""
    from .lib.errors import SourceError
    from .lib.sources.listing import list_source_files
    from .lib.sources.readers import iter_document_batches

    source = spec.sources[0]
    for file in list_source_files(source):
        try:
            for batch in iter_document_batches(source, file, 1000):
                for doc in batch:
                    yield doc
                    budget -= len(doc)
                    if budget <= 0:
                        return
        except SourceError:
            continue


def cmd_discover(args: argparse.Namespace) -> int:
    spec = _spec(args)
    from .defs.partitions import sync_partitions
    from .instance import local_instance

    settings = _settings(args)
    changed, removed, keys = sync_partitions(
        local_instance(spec.name), cast("StoreResource", settings.resources()["store"]).store(), spec
    )
    print("\n".join(keys))
    print(f"{len(keys)} partitions: {len(changed)} new or changed, {len(removed)} removed", file=sys.stderr)
    return 0


# Dagster's 60 s deadline for a call to the code server (a run's launch, a sensor tick) was passed on a 2-core machine
# at load 44, dropping a tokenizer run; Dagster reads these when each of its processes starts (its 1.13 _grpc/utils.py).
GRPC_TIMEOUTS = {"DAGSTER_GRPC_TIMEOUT_SECONDS": "300"}


def _refuse_busy_port(host: str, port: int) -> None:
    """One line naming the port when something (a first `shard-assets dev`) already serves it: the webserver would
    otherwise start its daemon and wait, silently."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the webserver binds: a closed one is free
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise SettingsError(
                f"port {port} on {host} is in use ({exc.strerror}; another `shard-assets dev`?): open "
                f"http://{host}:{port}, stop what serves it, or pass --port"
            ) from None


def _ui_dataset() -> str:
    """The dataset `shard-assets dev` shows (SHARD_DATASET_SPEC, else the demo's), in whose Dagster home `mix`
    records its runs; `mixtures` when there is no such spec or it does not load."""
    from .lib.spec import load_spec

    try:
        return load_spec(store_choice().spec_path).name
    except BuildError:  # no dataset spec (or a broken one): the mixtures' own home
        return "mixtures"


def _dev_runs(settings: StoreChoice) -> str:
    """What the UI's runs build: the spec and store here, or each run's own config where runs execute elsewhere."""
    import dagster as dg

    from .execution.run_queue import launches_elsewhere

    with dg.DagsterInstance.get() as instance:
        if launches_elsewhere(instance):
            return (
                f"runs execute through {type(instance.run_launcher).__name__}, each with the spec and store its run "
                "config names"
            )
    return f"spec {settings.spec_path}, store {settings.store_root}"


def cmd_dev(args: argparse.Namespace) -> int:
    """`dagster dev` on the dataset's instance (.dagster_home/<dataset>, configured by dagster.yaml) and workspace.

    The project folder is exported as SHARD_PROJECT_ROOT before Dagster changes directory, so the code location
    resolves the spec and store (relative ones from the environment or the launchpad included) where the CLI does."""
    from .lib.spec import load_spec

    project = Path(args.project).resolve()
    environ = {**os.environ, PROJECT_ROOT_VARIABLE: str(project)}
    settings = store_choice(environ=environ)  # refuses a bad DATASET_STORE now, not at every run and tick
    mixture_specs_folder(environ)  # and a SHARD_MIXTURE_SPECS that is no folder
    spec = load_spec(settings.spec_path)
    _refuse_busy_port(args.host, args.port)
    from .instance import prepare_home

    os.environ[PROJECT_ROOT_VARIABLE] = str(project)
    home = prepare_home(spec.name, project)
    print(f"Dagster UI on http://{args.host}:{args.port}: {_dev_runs(settings)}, Dagster home {home}", flush=True)
    os.chdir(home)  # dagster.yaml sits beside DAGSTER_HOME's config here, so Dagster warns about no other copy
    os.environ.setdefault("PYTHONWARNINGS", "ignore:Function `dev_command` is superseded")
    for name, seconds in GRPC_TIMEOUTS.items():  # inherited by the webserver, the daemon and the code server
        os.environ.setdefault(name, seconds)
    command = ["-m", "dagster", "dev", "-w", str(project / "workspace.yaml"), "-h", args.host, "-p", str(args.port)]
    for signum in (signal.SIGINT, signal.SIGTERM):  # a background job of a script starts with both ignored, and
        signal.signal(signum, signal.SIG_DFL)  # Dagster maps SIGTERM to SIGINT's handler: it would never stop
    os.execv(sys.executable, [sys.executable, *command])  # replaces this process: nothing returns


def cmd_gc(args: argparse.Namespace) -> int:
    from .lib.retention import Policy, collect, parse_duration, plan_collection

    max_age, grace = parse_duration(args.max_age, "--max-age"), parse_duration(args.grace, "--grace")
    policy = Policy(keep=args.keep, max_age_s=max_age, grace_s=grace)
    store_choice(spec=args.spec, store=args.store)  # checked before Dagster is imported
    store = cast("StoreResource", _settings(args).resources()["store"]).store()
    plan = plan_collection(store, policy)
    print(f"versions kept     {len(plan.kept_versions)}: {', '.join(plan.kept_versions) or '-'}")
    print(f"versions dropped  {len(plan.dropped_versions)}: {', '.join(plan.dropped_versions) or '-'}")
    for hold in plan.held:  # versions the policy alone would drop, kept because a reader (or a pin) holds a live lease
        print(
            f"  kept for a {hold.kind}  {hold.version}  ({hold.note}; {hold.key} live until "
            f"{time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime(hold.until))})"
        )
    if plan.abandoned_tokenizers:
        print(
            f"tokenizers abandoned {len(plan.abandoned_tokenizers)}: {', '.join(plan.abandoned_tokenizers)} (neither "
            "current nor used by a kept version)"
        )
    for key, size in plan.deletions:
        print(f"  {'delete' if args.delete else 'would delete'}  {key}  ({size:,} bytes)")
    if args.delete:
        print(f"freed             {collect(store, plan):,} bytes in {len(plan.deletions)} files")
    else:
        print(
            f"would free        {plan.bytes_freed:,} bytes in {len(plan.deletions)} files (dry run; pass --delete to "
            "delete)"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="shard-assets", description=__doc__.split("\n")[0])
    parser.add_argument("--debug", action="store_true", help="print tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", required=True)
    common = _Parser(add_help=False)
    common.add_argument("--spec", help=f"dataset spec TOML (default: SHARD_DATASET_SPEC, else {DEFAULT_SPEC})")
    common.add_argument(
        "--store",
        help="dataset root: a folder or s3://bucket/prefix (default: DATASET_STORE and DATASET_STORE_ROOT, else "
        "data/store)",
    )
    d = sub.add_parser(
        "demo", help="write the demo corpus (JSONL from the Python standard library's text) and its spec"
    )
    d.add_argument(
        "--folder", default=str(Path(DEFAULT_SPEC).parent), help="where to write them (default: %(default)s)"
    )
    d.set_defaults(func=cmd_demo)
    b = sub.add_parser("build", parents=[common], help="run every job end to end, publish, and read a first batch back")
    # argparse checks a string default with `type`
    workers = os.environ.get("SHARD_BUILD_WORKERS") or str(os.cpu_count() or 1)
    b.add_argument(
        "--workers",
        type=_positive,
        default=workers,
        help="runs executed at once (default: SHARD_BUILD_WORKERS, else the core count)",
    )
    b.add_argument("--seq-len", type=_positive, default=128)
    b.add_argument("--batch-size", type=_positive, default=4)
    b.add_argument(
        "--cache-dir", help="where the read-back of a remote store caches shards (default: under ~/.cache/shard_loader)"
    )
    b.set_defaults(func=cmd_build)
    x = sub.add_parser(
        "mix", help="publish a mixture spec (components pinned, audited, then made live) as a named run of mixture_job"
    )
    x.add_argument("--spec", required=True, help="mixture spec TOML ([[components]] with manifest and weight)")
    x.add_argument(
        "--store",
        help="where mixtures/<name>.json goes: a folder or s3://bucket/prefix (default: from the environment, else "
        "data/store)",
    )
    x.set_defaults(func=cmd_mix)
    sub.add_parser("presets", help="list the named corpus presets").set_defaults(func=cmd_presets)
    p = sub.add_parser(
        "plan", parents=[common], help="estimate tokens, bytes, disk and time from a sample of every file"
    )
    p.add_argument("--sample", type=_positive, default=200, help="documents sampled per file")
    p.set_defaults(func=cmd_plan)
    sub.add_parser(
        "discover",
        parents=[common],
        help="list the sources and register their partitions (one per file, or sized by SHARD_PARTITION_BYTES)",
    ).set_defaults(func=cmd_discover)
    v = sub.add_parser(
        "dev", help="start the Dagster UI and daemon on the dataset's instance (.dagster_home/<dataset>)"
    )
    v.add_argument(
        "--project", default=".", help="the repository folder holding workspace.yaml and dagster.yaml (default: .)"
    )
    v.add_argument("--host", default="127.0.0.1")
    v.add_argument("--port", type=_port, default=3000)
    v.set_defaults(func=cmd_dev)
    g = sub.add_parser(
        "gc", parents=[common], help="delete files no kept manifest version needs (a dry run unless --delete)"
    )
    g.add_argument("--keep", type=_positive, default=3, help="newest versions always kept (default %(default)s)")
    g.add_argument("--max-age", default="30d", help="versions younger than this are kept (default %(default)s)")
    g.add_argument(
        "--grace",
        default="7d",
        help="a superseded version, and any file written, stays this long (default %(default)s)",
    )
    g.add_argument("--delete", action="store_true", help="delete; without it, only list what would be deleted")
    g.set_defaults(func=cmd_gc)
    args = parser.parse_args(argv)
    try:
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)
    except Exception as exc:
        if args.debug or not _ours(exc):
            raise
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


def _ours(exc: Exception) -> bool:
    """A BuildError or ShardLoaderError: shard_loader (numpy, a third of a second) is imported only by the commands
    that use it, so an error raised before it cannot be its own."""
    loader = sys.modules.get("shard_loader.errors")
    return isinstance(exc, BuildError) or (loader is not None and isinstance(exc, loader.ShardLoaderError))


if __name__ == "__main__":
    sys.exit(main())
