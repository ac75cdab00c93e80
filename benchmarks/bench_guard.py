"""The exactness guard's budget against what it catches (issue 35): over bench_build's web-like partitions, the CPU-s
of the engine behind the guard at several budgets (the reference's share of the tokens), interleaved over repetitions
beside the engine alone, and, for differences planted in the engine's ids, the share of partitions whose guard
raises ExactnessError at each budget. Classes planted: one document in 100 / 1,000 (whole documents, by hash), the
documents holding a rarer script (Devanagari), the last tokens of documents over 64K characters, and one token id
(that of '€') wherever it occurs."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path


BUDGETS = (0.02, 0.005, 0.002, 0.001)
REPETITIONS = int(os.environ.get("BENCH_GUARD_REPETITIONS", 5))
BATCH = 1000


def _partitions(work: Path, files: int, file_mb: int) -> list[list[str]]:
    """bench_build's sources, each normalised as ingest does (one partition per file)."""
    import pyarrow.parquet as pq

    from shard_assets.lib.text import normalise_column

    from .bench_build import write_sources

    paths = write_sources(work / "sources", files, file_mb)
    return [normalise_column(pq.read_table(p, columns=["text"]).column(0).combine_chunks()).to_pylist() for p in paths]


def _planted(engine, texts: list[str], kind: str):
    """The engine's Encoded for `texts`, with ids changed in the documents of class `kind`."""
    import hashlib

    from shard_assets.lib.encoders import Encoded

    encoded = engine.encode(texts)
    ids = encoded.ids.copy()
    offsets = encoded.offsets
    euro = int(engine.encode(["€"]).ids[0])
    for i, text in enumerate(texts):
        a, b = int(offsets[i]), int(offsets[i + 1])
        h = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        if (
            (kind == "1 in 100 documents" and h % 100 == 0)
            or (kind == "1 in 1,000 documents" and h % 1000 == 0)
            or (kind == "documents with Devanagari" and any("\u0900" <= c <= "\u097f" for c in text))
        ) and b > a:
            ids[a] ^= 1
        elif kind == "end of documents over 64K characters" and len(text) > 1 << 16 and b > a:
            ids[b - 1] ^= 1
    if kind == "the token of '€'":
        ids[ids == euro] ^= 1
    return Encoded(ids, encoded.lengths)


KINDS = (
    "1 in 100 documents",
    "1 in 1,000 documents",
    "documents with Devanagari",
    "end of documents over 64K characters",
    "the token of '€'",
)


def _guarded(engine, reference, texts: list[str], budget: float, kind: str | None, counts: list | None = None) -> bool:
    """Whether the guard at `budget` passes the partition (False: ExactnessError); appends its GuardResult to
    `counts`."""
    from shard_assets.lib.encoders import ExactnessError, ExactnessGuard

    guard = ExactnessGuard(engine, reference, "p", len(texts), budget=budget)
    try:
        for i in range(0, len(texts), BATCH):
            batch = texts[i : i + BATCH]
            guard.check(batch, _planted(engine, batch, kind) if kind else engine.encode(batch))
        result = guard.finish()
        if counts is not None:
            counts.append(result)
    except ExactnessError:
        guard.close()
        return False
    return True


def run(size, work: Path) -> dict:
    from shard_assets.lib.encoders import encoders_for

    from .bench_build import _tokenizer

    work.mkdir(parents=True, exist_ok=True)
    os.environ["RAYON_NUM_THREADS"] = "1"
    files, file_mb = (5, 8) if size.name == "small" else (9, 40) if size.name == "large" else (5, 40)
    partitions = _partitions(work, files, file_mb)
    engine, reference = encoders_for(_tokenizer(work, work / "sources" / "web-000.parquet").read_text())
    variants = ["engine alone", *(f"guard {b}" for b in BUDGETS)]
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    counts: dict[str, list] = {v: [] for v in variants}
    for rep in range(REPETITIONS):
        for v in variants[rep % len(variants) :] + variants[: rep % len(variants)]:
            started = time.process_time()
            for texts in partitions:
                if v == "engine alone":
                    for i in range(0, len(texts), BATCH):
                        engine.encode(texts[i : i + BATCH])
                else:
                    assert _guarded(engine, reference, texts, float(v.split()[1]), None, counts[v])
            cpu[v].append(time.process_time() - started)
    caught = {(k, b): sum(not _guarded(engine, reference, t, b, k) for t in partitions) for k in KINDS for b in BUDGETS}
    summary = [
        {
            "figure": f"{v}: CPU-s over {files} partitions / engine alone (median of per-repetition ratios)",
            "value": f"{statistics.median(c / e for c, e in zip(cpu[v], cpu['engine alone'])):.2f}",
        }
        for v in variants[1:]
    ]
    summary += [
        {
            "figure": f"{v}: documents compared per partition / share of tokens re-encoded by the reference",
            "value": f"{statistics.median(r.sampled for r in counts[v]):.0f} of "
            f"{statistics.median(r.documents for r in counts[v]):.0f} / "
            f"{sum(r.sampled_tokens for r in counts[v]) / sum(r.tokens for r in counts[v]):.2%}",
        }
        for v in variants[1:]
    ]
    summary += [
        {
            "figure": f"planted: {kind}, partitions caught at budget " + " / ".join(map(str, BUDGETS)),
            "value": " / ".join(f"{caught[kind, b]} of {files}" for b in BUDGETS),
        }
        for kind in KINDS
    ]
    return {"summary": summary, "cpu": cpu}
