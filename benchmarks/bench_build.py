"""The whole build against the engine alone (issue 35): `shard-assets build --workers 1` over web-like parquet files
(long documents of varied Unicode, CRLF, tabs, controls, decomposed accents, duplicates), a 50k byte-level BPE given as
a file. Fixed costs cancel: each repetition builds 1 file and then FILES files into fresh stores (order rotating), and
the marginal rate is (tokens of FILES - tokens of 1) / (CPU-s of FILES - CPU-s of 1), CPU of the whole process
(children included) and per stage (ingest, tokenizer, tokenize, publish; the rest is start-up, discovery and the
read-back). The engine alone (fastokens, encode only, one thread) runs on the same normalised texts in the same
repetition. Reports the medians of per-repetition ratios, documents differing from the reference (the guard's count)
and peak RSS. BENCH_BUILD_REPETITIONS=1 makes a quick smoke run (its figures are not results).

Issue 48's scenario: `python -m benchmarks.bench_build english large 5 "entry"` builds 1 and then 9 files of 40 MB of
English web-like text (benchmarks/english.py) and the 9 files again with `[dedup] near = true`, the three builds
interleaved in each repetition; the engine is measured as the issue states (a fresh fastokens object, one pass); the
result is a new entry of benchmarks/results/build.json."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

VOCAB = 50_000
REPETITIONS = int(os.environ.get("BENCH_BUILD_REPETITIONS", 5))
MEAN_DOCUMENT_CHARS = 16_000  # the lognormal's median (the files averaged ~16.7K); its mean comes out ~34K
ENGLISH_MEDIAN_CHARS = 11_000  # the English text's mean comes out ~16.5 KB, the documents
TARGET = 0.22  # of the engine alone on English web text (issue 48; issue 35 asked 0.3 on the synthetic text)
TOKENS_2T = 2e12
STAGES = ("ingest_job", "tokenizer_job", "tokenize_job", "publish_job")

# Runs the documented command in this process (shard_assets.cli.main) with each job's CPU-seconds recorded: with
# --workers 1 and no run launcher every run executes in this process.
DRIVER = """
import json, sys, time, resource
import shard_assets.runner as runner
cpu = {}
def timed(f):
    def wrapper(executor, job, *args, **kwargs):
        started = time.process_time()
        try:
            return f(executor, job, *args, **kwargs)
        finally:
            cpu[job] = cpu.get(job, 0.0) + time.process_time() - started
    return wrapper
runner.run_partitions, runner.run_one = timed(runner.run_partitions), timed(runner.run_one)
from shard_assets.cli import main
code = main(["build", "--workers", "1", "--spec", sys.argv[1], "--store", sys.argv[2], "--cache-dir", sys.argv[3]])
import shard_loader
m = shard_loader.open_manifest(sys.argv[2]).manifest
peak = int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]) * 1024
print(json.dumps({"code": code, "cpu": cpu, "tokens": sum(s.tokens for s in m.splits.values()), "rss": peak}))
"""

# Issue 48's second measure: the same design from the same libraries outside the project (no Dagster, records, guard
# or dedup): read the source parquet, normalise, blake2b, write zstd raw parquet; read it back, encode with a
# fastokens object reused across files, EOD after each document, write each split's tokens and document ends, sha256.
LIBRARY = """
import hashlib, json, sys
from pathlib import Path
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from shard_assets.lib.encoders import FastokensEncoder
from shard_assets.lib.text import column_hashes, is_val, normalise_column
tok, out, files = Path(sys.argv[1]).read_text(), Path(sys.argv[2]), sys.argv[3:]
engine, eod, tokens = FastokensEncoder(tok, "library pipeline"), 0, 0
schema = pa.schema([("text", pa.large_string()), ("doc_hash", pa.uint64())])
for i, f in enumerate(files):
    raw = out / f"raw-{i}.parquet"
    with pq.ParquetWriter(raw, schema, compression="zstd", use_dictionary=["doc_hash"]) as w:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=1000, columns=["text"]):
            texts = normalise_column(batch.column(0))
            w.write_table(pa.table([texts, pa.array(column_hashes(texts), pa.uint64())], schema=schema))
    splits = {False: ([], []), True: ([], [])}
    for batch in pq.ParquetFile(raw).iter_batches(batch_size=1000):
        encoded, val = engine.encode(batch.column(0).to_pylist()), is_val(batch.column(1).to_numpy(), 0.01)
        ids = np.insert(encoded.ids.astype(np.uint16), encoded.offsets[1:], eod)
        for flag in (False, True):
            keep = np.repeat(val == flag, encoded.lengths + 1)
            splits[flag][0].append(ids[keep])
            splits[flag][1].append(encoded.lengths[val == flag] + 1)
        tokens += len(ids)
    for flag, (parts, lengths) in splits.items():
        for suffix, array in (("bin", np.concatenate(parts)), ("npy", np.cumsum(np.concatenate(lengths)))):
            path = out / f"{i}-{int(flag)}.{suffix}"
            array.tofile(path)
            with open(path, "rb") as f:
                hashlib.file_digest(f, "sha256")
print(json.dumps({"tokens": tokens}))
"""


def _words(rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """A Zipf-weighted vocabulary: Latin-script words with accents (precomposed), Cyrillic, Greek, CJK runs, Arabic,
    Devanagari (combining vowel signs), numbers, URLs, emoji and punctuation."""
    latin, cyr, greek = "etaoinshrdlcumwfgypbvkjxqz", "абвгдежзиклмнопрстуфхцчшщыэюя", "αβγδεζηθικλμνξοπρστυφχψω"
    words = ["".join(rng.choice(list(latin), rng.integers(1, 11))) for _ in range(12_000)]
    words += ["".join(rng.choice(list(latin + "éèàüöçñ"), rng.integers(2, 10))) for _ in range(2_000)]
    words += ["".join(rng.choice(list(cyr), rng.integers(2, 10))) for _ in range(2_000)]
    words += ["".join(rng.choice(list(greek), rng.integers(2, 9))) for _ in range(500)]
    words += ["".join(chr(c) for c in rng.integers(0x4E00, 0x9FFF, rng.integers(2, 12))) for _ in range(1_500)]
    words += ["".join(chr(c) for c in rng.integers(0x0627, 0x064A, rng.integers(2, 8))) for _ in range(500)]
    words += [
        "".join(chr(c) + chr(v) for c, v in zip(rng.integers(0x0915, 0x0939, 3), rng.integers(0x093E, 0x094C, 3)))
        for _ in range(500)
    ]
    words += [str(n) for n in rng.integers(0, 100_000, 1_000)]
    words += [f"https://www.{w}.com/{v}?id={n}" for w, v, n in zip(words[:300], words[300:600], range(300))]
    words += ["😀", "🚀", "👍🏽", "❤️", "—", "“", "”", "…", "(", ")", "!", "?", ":", ";", "&", "©", "€", "%"]
    weights = 1.0 / np.arange(1, len(words) + 1) ** 1.05
    order = rng.permutation(len(words))  # frequent words from every script, not only Latin
    return [words[i] for i in order], weights / weights.sum()


def _document(rng: np.random.Generator, words: list[str], p: np.ndarray) -> str:
    """One web-like document: paragraphs of sentences, its line breaks CRLF in about a third of documents, with tabs,
    the odd control character, lone CR, no-break space and decomposed accent."""
    n = max(8, int(rng.lognormal(np.log(MEAN_DOCUMENT_CHARS / 6.2), 0.9)))
    tokens = [words[i] for i in rng.choice(len(words), n, p=p)]
    for at in rng.integers(0, n, n // 12):  # sentence ends
        tokens[at] += rng.choice([".", ".", ",", "?", "!", ":"])
    for at in rng.integers(0, n, n // 60):  # paragraph breaks, headings, list items
        tokens[at] += rng.choice(["\n\n", "\n", "\n- ", "\n\t", "\n\n## "])
    if rng.random() < 0.05:
        tokens[int(rng.integers(n))] += rng.choice(["\x00", "\x0c", "\x7f", "\u0085", "\r", "\u00a0", "e\u0301"])
    text = " ".join(tokens)
    return text.replace("\n", "\r\n") if rng.random() < 0.33 else text


def write_sources(folder: Path, files: int, file_mb: int, seed: int = 35, text: str = "synthetic") -> list[Path]:
    """`files` parquet files (`text`, zstd) of about `file_mb` MB of documents each, 2% exact duplicates and 1% too
    short; kept when they exist. `text`: "synthetic" (the multilingual words above, ~7.6 bytes per token) or "english"
    (English web-like prose, benchmarks/english.py)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .english import documents

    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"web-{i:03d}.parquet" for i in range(files)]
    rng = np.random.default_rng(seed)
    words, p = _words(rng)
    english = documents(rng, ENGLISH_MEDIAN_CHARS) if text == "english" else None
    for path in paths:
        if path.exists():
            continue
        docs: list[str] = []
        while sum(map(len, docs)) < file_mb << 20:
            roll = rng.random()
            docs.append(docs[int(rng.integers(len(docs)))] if docs and roll < 0.02 else "hi" if roll < 0.03 else "")
            docs[-1] = docs[-1] or (next(english) if english else _document(rng, words, p))
        pq.write_table(pa.table({"text": docs, "url": [f"https://example.org/{i}" for i in range(len(docs))]}), path)
    return paths


def _tokenizer(work: Path, source: Path) -> Path:
    """A 50k byte-level BPE trained once on the first file (the spec gives it as a file, as the issue's build did)."""
    import pyarrow.parquet as pq

    from shard_assets.lib.spec import TokenizerSpec
    from shard_assets.lib.tokenizer import build_tokenizer

    path = work / "tokenizer.json"
    if not path.exists():
        texts = pq.read_table(source, columns=["text"]).column(0).to_pylist()
        text, _ = build_tokenizer(TokenizerSpec(vocab_size=VOCAB, train_max_bytes=32 << 20), iter(texts))
        path.write_text(text)
    return path


def _spec(work: Path, name: str, files: list[Path], tokenizer: Path, tables: str = "") -> Path:
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        link = folder / f.name
        if not link.exists():
            link.symlink_to(f)
    spec = folder / "spec.toml"
    spec.write_text(
        f'name = "web"\nval_fraction = 0.01\n\n[tokenizer]\nkind = "file"\npath = "{tokenizer}"\n\n'
        f'[[sources]]\nname = "web"\nuri = "{folder}/*.parquet"\nformat = "parquet"\n{tables}'
    )
    return spec


def _build(spec: Path, out: Path) -> dict:
    """One `shard-assets build --workers 1` into a fresh store and Dagster home: CPU-s of the process (children
    included), per job, the tokens published and peak RSS."""
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    (out / "home").mkdir(parents=True)
    env = {**os.environ, "DAGSTER_HOME": str(out / "home"), "RAYON_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(spec), str(out / "store"), str(out / "cache")],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"build of {spec} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["total"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return result


def _library(tokenizer: Path, files: list[Path], out: Path) -> dict:
    """The library-only pipeline (LIBRARY) over `files` in a fresh process: CPU-s (children included) and tokens."""
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-c", LIBRARY, str(tokenizer), str(out), *map(str, files)],
        capture_output=True,
        text=True,
        env={**os.environ, "RAYON_NUM_THREADS": "1"},
        cwd=Path(__file__).resolve().parents[1],
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"library pipeline failed:\n{proc.stderr[-3000:]}")
    return {
        **json.loads(proc.stdout.strip().splitlines()[-1]),
        "total": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
    }


def _guard_differing(store: Path) -> int:
    """Documents the guard found differing from the reference, over every partition record of the build."""
    total = 0
    for path in (store / "tokenized").glob("*/parts/*.json"):
        record = json.loads(path.read_text())
        total += int((record.get("encoder") or {}).get("differing", 0))
    return total


def _engine(store: Path, tok_json: str) -> tuple[int, float, int]:
    """The engine alone on the build's normalised texts (the raw parquet files it published), as the issue measures
    it: a fresh fastokens object, one pass; tokens, CPU-s and UTF-8 bytes."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from shard_assets.lib.encoders import FastokensEncoder

    columns = [pq.read_table(f).column("text") for f in sorted((store / "raw").rglob("*.parquet"))]
    texts = [t for c in columns for t in c.to_pylist()]
    engine = FastokensEncoder(tok_json, "engine alone")
    started = time.process_time()
    tokens = sum(int(engine.encode(texts[i : i + 1000]).lengths.sum()) for i in range(0, len(texts), 1000))
    return tokens, time.process_time() - started, sum(pc.sum(pc.binary_length(c)).as_py() for c in columns)


def run(size, work: Path, text: str = "synthetic", near: bool = False, repetitions: int = REPETITIONS) -> dict:
    """1 file and then FILES files built in each repetition (order rotating), with `near` a third build of the FILES
    files with `[dedup] near = true`; `text` as write_sources takes it."""
    work.mkdir(parents=True, exist_ok=True)
    files, file_mb = (5, 8) if size.name == "small" else (9, 40) if size.name == "large" else (5, 40)
    folder = work / ("sources" if text == "synthetic" else f"sources-{text}-{files}x{file_mb}")
    sources = write_sources(folder, files, file_mb, text=text)
    tokenizer = _tokenizer(work if text == "synthetic" else folder, sources[0])
    tok_json = tokenizer.read_text()
    variants = ["one", "all", *(["near", "grouped"] if near else [])]
    specs = {
        "one": _spec(work, "one", sources[:1], tokenizer),
        "all": _spec(work, "all", sources, tokenizer),
        "near": _spec(work, "near", sources, tokenizer, "\n[dedup]\nnear = true\n"),
        "grouped": _spec(work, "grouped", sources, tokenizer),  # the files in one partition, as docs/scale.md advises
    }
    specs["grouped"].write_text('partition_bytes = "2GB"\n' + specs["grouped"].read_text())
    os.environ["RAYON_NUM_THREADS"] = "1"
    reps: list[dict] = []
    for rep in range(repetitions):
        order = variants[rep % len(variants) :] + variants[: rep % len(variants)]
        builds = {v: _build(specs[v], work / f"out-{v}") for v in order}
        if near:  # issue 48's scenario: the library-only pipeline over the same 1 and FILES files beside
            library = {n: _library(tokenizer, sources[:n], work / f"out-library-{n}") for n in (1, len(sources))}
            lib_one, lib_all = library[1], library[len(sources)]
            library_rate = (lib_all["tokens"] - lib_one["tokens"]) / (lib_all["total"] - lib_one["total"])
        engine_tokens, engine_cpu, engine_bytes = _engine(work / "out-all" / "store", tok_json)
        one, many = builds["one"], builds["all"]
        marginal_tokens = many["tokens"] - one["tokens"]
        reps.append(
            {
                "marginal_rate": marginal_tokens / (many["total"] - one["total"]),
                "jobs_rate": marginal_tokens / (sum(many["cpu"].values()) - sum(one["cpu"].values())),
                "engine_rate": engine_tokens / engine_cpu,
                "bytes_per_token": engine_bytes / engine_tokens,
                "stages": {s: (many["cpu"].get(s, 0) - one["cpu"].get(s, 0)) / marginal_tokens * 1e6 for s in STAGES},
                "fixed": one["total"] - sum(one["cpu"].values()),
                "differing": _guard_differing(work / "out-all" / "store"),
                **{v: builds[v] for v in variants},
                **(
                    {
                        "near_extra": (builds["near"]["total"] - many["total"]) / (many["total"] - one["total"]),
                        "near_extra_jobs": (sum(builds["near"]["cpu"].values()) - sum(many["cpu"].values()))
                        / (sum(many["cpu"].values()) - sum(one["cpu"].values())),
                        "library_rate": library_rate,
                        "of_library": marginal_tokens / (many["total"] - one["total"]) / library_rate,
                        "grouped_of_library": (builds["grouped"]["tokens"] - one["tokens"])
                        / (builds["grouped"]["total"] - one["total"])
                        / library_rate,
                    }
                    if near
                    else {}
                ),
            }
        )
        print(f"   rep {rep}: {json.dumps(reps[-1])}", flush=True)
    return {"summary": _summary(reps, files, file_mb, text, near), "repetitions": reps}


def _summary(reps: list[dict], files: int, file_mb: int, text: str, near: bool) -> list[dict]:
    """The rows of a run: medians of per-repetition figures."""

    def median(key: str) -> float:
        return statistics.median(r[key] for r in reps)

    ratios = [r["marginal_rate"] / r["engine_rate"] for r in reps]
    rate, n = median("marginal_rate"), len(reps)
    fixed_costs = [r["one"]["total"] - (r["all"]["total"] - r["one"]["total"]) / (files - 1) for r in reps]
    near_rows = [
        {
            "figure": f"near dedup: the {files}-file build with `[dedup] near = true` less the exact one, / the exact "
            "build's marginal CPU (whole processes; the jobs alone)",
            "value": f"{median('near_extra'):.2f} ({min(r['near_extra'] for r in reps):.2f}-"
            f"{max(r['near_extra'] for r in reps):.2f}); {median('near_extra_jobs'):.2f}",
            "target": "<= 0.5",
        },
        {
            "figure": "the library-only pipeline of the same design (LIBRARY: no Dagster, records, guard or dedup), "
            "marginal tokens per CPU-s; the whole build / it (median of per-repetition ratios, min-max)",
            "value": f"{median('library_rate') / 1e6:.2f}M; {median('of_library'):.2f} "
            f"({min(r['of_library'] for r in reps):.2f}-{max(r['of_library'] for r in reps):.2f})",
            "target": ">= 0.9",
        },
        {
            "figure": f'the {files} files in one partition (`partition_bytes = "2GB"`), whole build / the library '
            "pipeline (median of per-repetition ratios, min-max)",
            "value": f"{median('grouped_of_library'):.2f} ({min(r['grouped_of_library'] for r in reps):.2f}-"
            f"{max(r['grouped_of_library'] for r in reps):.2f})",
        },
    ]
    return [
        {
            "figure": f"text: {text}, bytes per token with the benchmark's 50k BPE",
            "value": f"{median('bytes_per_token'):.2f}",
        },
        {
            "figure": f"whole build, marginal tokens per CPU-s ({files} files of {file_mb} MB vs 1; median of {n})",
            "value": f"{rate / 1e6:.2f}M; 2T tokens = {TOKENS_2T / rate / 3600:,.0f} core-hours",
        },
        {
            "figure": "engine alone (fastokens, a fresh object, one pass, 1 thread) on the same texts",
            "value": f"{median('engine_rate') / 1e6:.2f}M",
        },
        {
            "figure": "the jobs alone (CPU-s inside the four jobs' runs, less noisy) / engine alone",
            "value": f"{statistics.median(r['jobs_rate'] / r['engine_rate'] for r in reps):.3f}",
        },
        {
            "figure": "whole build / engine alone (median of per-repetition ratios, min-max)",
            "value": f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})",
            "target": f">= {TARGET}",
        },
        *(near_rows if near else []),
        *(
            {
                "figure": f"marginal CPU-s per 1M tokens, {stage.removesuffix('_job')} (median of {n})",
                "value": f"{statistics.median(r['stages'][stage] for r in reps):.3f}",
            }
            for stage in STAGES
        ),
        {
            "figure": "fixed cost of a build (the 1-file build less one file's marginal CPU-s; outside the jobs: "
            "start-up, discovery, read-back), CPU-s",
            "value": f"{statistics.median(fixed_costs):.1f} ({median('fixed'):.1f})",
        },
        {"figure": "documents differing from the reference (guard)", "value": str(max(r["differing"] for r in reps))},
        {
            "figure": "peak RSS of the build process",
            "value": f"{max(r['all']['rss'] for r in reps) / 2**20:.0f} MiB",
            "target": "< 1024 MiB",
        },
    ]


if __name__ == "__main__":  # the scenario alone: english [small|medium|large] [reps] "entry name"
    from .machine import machine_info
    from .sizes import get_size

    size, reps_wanted, entry = get_size(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    load = os.getloadavg()[0]
    found = run(size, Path(__file__).parent / "results" / "work" / "build", sys.argv[1], True, reps_wanted)
    found.update(machine=machine_info(), load_average=[round(load, 1), round(os.getloadavg()[0], 1)])
    out = Path(__file__).parent / "results" / "build.json"
    out.write_text(json.dumps({**json.loads(out.read_text()), entry: found}, indent=2) + "\n")
    for row in found["summary"]:
        print(f"{row['figure']:<110} {row['value']:<30} {row.get('target', '')}")
