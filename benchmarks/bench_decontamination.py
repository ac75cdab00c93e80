"""Decontamination's cost against the build's (issue 45): the curation stage (read a raw partition, check every
document's 13-grams against the eval index, write the curated parquet where it dropped any) in CPU-s per document,
over the marginal CPU-s per document of `shard-assets build --workers 1` without it (bench_build's web-like parquet
files and 50k BPE: FILES files built against 1, fixed costs cancel). The eval sets: three JSONL files of random
passages from the same vocabulary holding EVAL_WORDS words (about as many 13-grams: MMLU's test set is ~1.4M words),
plus 20-word runs quoted from 1% of the training documents, so the stage drops documents and writes parquet.
Interleaved within each repetition (build of 1 file, build of FILES, then the stage on the FILES build's raw
partitions); medians of per-repetition ratios."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import numpy as np

from .bench_build import REPETITIONS, _build, _spec, _tokenizer, _words, write_sources

EVAL_WORDS = 1_500_000
QUOTED = 0.01  # of the training documents, a run of which an eval passage quotes
TARGET = 0.1


def write_eval_sets(folder: Path, sources: list[Path], seed: int = 45) -> None:
    """Three JSONL eval sets of random passages, the first also quoting a 20-word run of QUOTED of the documents."""
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "quoted.jsonl").exists():
        return
    rng = np.random.default_rng(seed)
    words, p = _words(rng)
    for name in ("arc", "mmlu", "trivia"):
        lines = []
        for _ in range(EVAL_WORDS // 3 // 100):
            lines.append(json.dumps({"text": " ".join(words[i] for i in rng.choice(len(words), 100, p=p))}))
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    quoted = []
    for path in sources:
        for text in pq.read_table(path, columns=["text"]).column(0).to_pylist():
            tokens = text.split()
            if rng.random() < QUOTED and len(tokens) > 40:
                at = int(rng.integers(0, len(tokens) - 20))
                quoted.append(json.dumps({"text": " ".join(tokens[at : at + 20])}))
    (folder / "quoted.jsonl").write_text("\n".join(quoted) + "\n")


def _documents(store: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in (store / "raw").rglob("*.parquet"))


def _stage(spec_path: Path, store_root: Path) -> dict:
    """The curation stage over every raw partition of a built store: CPU-s, documents in and dropped; and the n-gram
    check alone (hash and look up, texts in memory) on the same documents."""
    import pyarrow.parquet as pq

    from shard_assets.lib.curation.curate import curated_input
    from shard_assets.lib.curation.decontamination import build_eval_index, store_eval_index
    from shard_assets.lib.layout import RAW_PREFIX
    from shard_assets.lib.records import RawRecord, get_record
    from shard_assets.lib.spec import load_spec
    from shard_assets.lib.store import LocalFolderStore

    spec, store = load_spec(spec_path), LocalFolderStore(store_root)
    started = time.process_time()
    index = build_eval_index(spec)  # once per build (cached per process) and stored: not a per-document cost
    store_eval_index(store, index)
    index_cpu = time.process_time() - started
    keys = [k for k, _ in store.list(RAW_PREFIX) if k.endswith(".json") and k.count("/") == 2]
    raws = [get_record(store, k, RawRecord, "bench") for k in keys]
    started = time.process_time()
    records = [curated_input(store, spec, raw)[1] for raw in raws]
    stage_cpu = time.process_time() - started
    texts = [pq.read_table(store_root / r.key, columns=["text"]).column(0) for r in raws]
    started = time.process_time()
    for column in texts:
        for chunk in column.chunks:
            for i in range(0, len(chunk), 1000):
                index.contaminated(chunk[i : i + 1000])
    check_cpu = time.process_time() - started
    return {
        "stage_cpu": stage_cpu,
        "check_cpu": check_cpu,
        "index_cpu": index_cpu,
        "ngrams": len(index.grams.hashes),
        "documents": sum(r.documents for r in raws),
        "dropped": sum(r.dropped_total for r in records if r),
    }


def run(size, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    files, file_mb = (5, 8) if size.name == "small" else (5, 40)
    sources = write_sources(work.parent / "build" / "sources", files, file_mb)
    tokenizer = _tokenizer(work.parent / "build", sources[0])
    specs = {1: _spec(work, "one", sources[:1], tokenizer), files: _spec(work, "all", sources, tokenizer)}
    write_eval_sets(work / "evals", sources)
    checked = work / "all" / "checked.toml"
    checked.write_text(specs[files].read_text() + f'\n[decontaminate]\nagainst = ["{work}/evals/*.jsonl"]\n')
    reps = []
    for rep in range(REPETITIONS):
        order = [1, files] if rep % 2 == 0 else [files, 1]
        builds = {n: _build(specs[n], work / f"out-{n}") for n in order}
        documents = {n: _documents(work / f"out-{n}" / "store") for n in builds}
        build_per_doc = (builds[files]["total"] - builds[1]["total"]) / (documents[files] - documents[1])
        stage = _stage(checked, work / f"out-{files}" / "store")
        reps.append(
            {
                "build_cpu_per_document": build_per_doc,
                "stage_cpu_per_document": stage["stage_cpu"] / stage["documents"],
                "check_cpu_per_document": stage["check_cpu"] / stage["documents"],
                **stage,
            }
        )
        print(f"   rep {rep}: {json.dumps(reps[-1])}", flush=True)

    def median(key: str) -> float:
        return statistics.median(r[key] for r in reps)

    stage_ratios = [r["stage_cpu_per_document"] / r["build_cpu_per_document"] for r in reps]
    check_ratios = [r["check_cpu_per_document"] / r["build_cpu_per_document"] for r in reps]
    summary = [
        {
            "figure": f"build's marginal CPU per document ({files} files of {file_mb} MB vs 1, no [decontaminate])",
            "value": f"{median('build_cpu_per_document') * 1e6:.0f} us",
        },
        {
            "figure": f"curation stage per document: read, check against {reps[0]['ngrams']:,} eval 13-grams, write "
            f"({reps[0]['dropped']:,} of {reps[0]['documents']:,} dropped)",
            "value": f"{median('stage_cpu_per_document') * 1e6:.0f} us",
        },
        {
            "figure": f"curation stage / build's marginal CPU per document (median of {REPETITIONS}, min-max)",
            "value": f"{statistics.median(stage_ratios):.3f} ({min(stage_ratios):.3f}-{max(stage_ratios):.3f})",
            "target": f"<= {TARGET}",
        },
        {
            "figure": "the n-gram check alone (hash, look up; texts in memory) / build's marginal CPU per document",
            "value": f"{statistics.median(check_ratios):.3f} ({min(check_ratios):.3f}-{max(check_ratios):.3f})",
        },
        {"figure": "eval index build, once per build (CPU-s)", "value": f"{max(r['index_cpu'] for r in reps):.1f}"},
    ]
    return {"summary": summary, "repetitions": reps}
