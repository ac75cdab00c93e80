"""Tiny datasets built with real Dagster runs, for orchestration tests."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from shard_assets.definitions import ASSETS
from shard_assets.defs.resources import DatasetResource, StoreResource
from shard_assets.lib.layout import partition_record_key

WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon".split()
)


def run_sensor_tick(inst: dg.DagsterInstance, resources: dict) -> list[dg.RunRequest]:
    """One discovery sensor tick, and the runs it requests executed as the daemon would; returns the requests."""
    from shard_assets.defs.sensors import raw_files_sensor

    tick = raw_files_sensor(dg.build_sensor_context(instance=inst, resources=resources))
    for request in tick.run_requests:
        dg.materialize(
            ASSETS,
            selection=request.asset_selection or ["raw_documents", "dedup", "tokenized_shards"],  # None: tokenize_job
            partition_key=request.partition_key,
            tags=request.tags,
            instance=inst,
            resources=resources,
        )
    return list(tick.run_requests)


def publish_checks() -> int:
    """The blocking checks a build's summary counts: those of publish_job's assets (splits and manifest)."""
    from shard_assets.definitions import build_definitions

    return len(build_definitions().resolve_job_def("publish_job").asset_layer.asset_graph.asset_check_keys)


def forge_registration(store: Path, partition: str, uri: str) -> None:
    """Point `partition`'s registration (its first piece) at `uri`, as a forger with write access would."""
    key = store / partition_record_key(partition)
    record = json.loads(key.read_text())
    record["pieces"][0]["uri"] = uri
    key.write_text(json.dumps(record))


def write_jsonl(path: Path, n: int, seed: int) -> None:
    """`n` distinct documents of a few dozen words, deterministic in `seed`."""
    lines = []
    for i in range(n):
        words = [WORDS[(seed * 7 + i * 13 + j * j) % len(WORDS)] for j in range(20 + (i * 7 + seed) % 40)]
        lines.append(json.dumps({"text": f"Document {seed}-{i}: " + " ".join(words) + "."}))
    path.write_text("\n".join(lines) + "\n")


def write_spec(
    path: Path, source_glob: str, vocab_size: int = 300, val_fraction: float = 0.2, sections: str = ""
) -> Path:
    """A spec of one JSONL source "web", with `sections` (TOML tables such as [decontaminate]) before it."""
    path.write_text(
        f'name = "tiny"\nval_fraction = {val_fraction}\nmin_chars = 10\n\n'
        f'[tokenizer]\nkind = "train_bpe"\nvocab_size = {vocab_size}\n\n{sections}\n'
        f'[[sources]]\nname = "web"\nuri = "{source_glob}"\nformat = "jsonl"\n'
    )
    return path


def materialize_raw(inst: dg.DagsterInstance, resources: dict, partition: str) -> tuple[bool, str]:
    """Materialize one partition of raw_documents, quietly: whether it succeeded and its failure's message."""
    from shard_assets.execution.local import QUIET, failure_message

    result = dg.materialize(
        ASSETS,
        selection=["raw_documents"],
        partition_key=partition,
        instance=inst,
        resources=resources,
        run_config=QUIET,
        raise_on_error=False,
    )
    return result.success, failure_message(result)


def tiny_resources(spec: Path, store: Path) -> dict:
    return {"dataset": DatasetResource(spec_path=str(spec)), "store": StoreResource(root=str(store))}


def tiny_dataset(tmp: Path, files: int = 2, docs: int = 120) -> tuple[Path, Path, dict]:
    """(spec path, store root, resources) of a JSONL source with `files` files."""
    (tmp / "src").mkdir(parents=True, exist_ok=True)
    for i in range(files):
        write_jsonl(tmp / "src" / f"part{i}.jsonl", docs, seed=i)
    spec = write_spec(tmp / "spec.toml", f"{tmp}/src/*.jsonl")
    return spec, tmp / "store", tiny_resources(spec, tmp / "store")


def instance() -> dg.DagsterInstance:
    return dg.DagsterInstance.ephemeral()


AUTOMATED = ("tokenizer", "tokenized_shards", "splits", "manifest")


def run_automation(defs: dg.Definitions, inst: dg.DagsterInstance, resources: dict, cursor) -> tuple[list, object]:
    """Tick the automation conditions and run what each tick requests, as the automation sensor would,
    until a tick requests nothing; returns [(asset, sorted partitions)] per request and the last cursor."""
    requested = []
    for _ in range(8):
        result = dg.evaluate_automation_conditions(defs=defs, instance=inst, cursor=cursor)
        cursor = result.cursor
        if not result.total_requested:
            return requested, cursor
        for key in AUTOMATED:
            partitions = result.get_requested_partitions(dg.AssetKey(key))
            if partitions:
                requested.append((key, sorted(p or "" for p in partitions)))
            for p in partitions:
                dg.materialize(ASSETS, selection=[key], partition_key=p, instance=inst, resources=resources)
    raise AssertionError(f"automation kept requesting runs after 8 ticks: {requested}")
