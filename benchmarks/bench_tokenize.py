"""Tokenization on one core, variants interleaved in one process over several repetitions in rotating order:
the reference (HF `tokenizers`, whole documents), each engine alone on the same texts in memory, and the
tokenized-shard asset's work (raw parquet -> encoder + exactness guard -> published .npy/.bin). Reports
medians of per-repetition ratios with their spread, documents differing from the reference, peak RSS,
and core-hours for 2T tokens, on one pinned core and on all cores (one process per core). The corpus includes
documents over 1 MB. A second corpus, whole Python source files with 15 documents over 1 MB in partitions of ~2M
tokens, measures the exactness guard where MB-sized documents weigh most: the reference's share of the tokens (and
what the whole-document sample before it would have been), the asset against the engine alone, and peak RSS.
BENCH_TOKENIZE_REPETITIONS=1 makes a quick smoke run (its figures are not results)."""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .machine import PEAK_RSS_SNIPPET

VOCAB = 50_000
REPETITIONS = int(os.environ.get("BENCH_TOKENIZE_REPETITIONS", 5))
LONG_DOCUMENTS, LONG_DOCUMENT_BYTES = 4, 3 << 19  # 1.5 MB each, joined from source files outside the corpus
WEB_DOCUMENT_CHARS = (
    4000  # about a web document (DCLM-baseline's mean); partitions then hold thousands, as in production
)
TODAY_PER_CORE = 0.40e6  # the asset before the encoder layer (issue 16), tokens/s per core
TODAY_OF_REFERENCE = 0.40 / 0.53  # the same, as a share of the reference measured beside it (issue 16)
TOKENS_2T = 2e12
REFERENCE = "reference (tokenizers)"
HOT = "asset (hot path)"
HOT_10X = "asset, partition 10x (nearer production size)"
HOT_10X_UNGUARDED = "asset, partition 10x, guard off (not a build mode: the rest of the hot path)"
ENGINE_ALL = "engine alone, one process per core"
ASSET_ALL = "asset 10x, one process per core"
ASSET_ONE_PROCESS = "asset 10x, one process on all cores (reader and guard threads beside the engine)"
MB_DOCUMENTS, MB_LONG = 4_421, 15  # the corpus of issue 25: 4,436 documents, 15 over 1 MB
MB_PARTITION_CHARS = 8 << 20  # ~2M tokens of Python source per partition


def _web_documents(corpus: Path, web: Path) -> None:
    """`web/part*.jsonl`: the corpus's documents cut at blank lines into pieces of about WEB_DOCUMENT_CHARS."""
    web.mkdir(exist_ok=True)
    for part in sorted(corpus.glob("part*.jsonl")):
        if (web / part.name).exists():
            continue
        with open(web / part.name, "w") as out:
            for line in open(part):
                piece = ""
                for block in json.loads(line)["text"].split("\n\n"):
                    piece = f"{piece}\n\n{block}" if piece else block
                    if len(piece) >= WEB_DOCUMENT_CHARS:
                        out.write(json.dumps({"text": piece}) + "\n")
                        piece = ""
                if piece:
                    out.write(json.dumps({"text": piece}) + "\n")


def _long_documents(web: Path) -> None:
    """Documents over 1 MB of real text (source files outside the corpus, joined), spread over the web partitions."""
    from .corpus import source_files

    parts = sorted(web.glob("part*.jsonl"))
    if (web / "long.done").exists():
        return
    texts = (f.read_text(errors="replace") for f in reversed(source_files()))
    for i in range(LONG_DOCUMENTS):
        doc = []
        while sum(map(len, doc)) < LONG_DOCUMENT_BYTES:
            doc.append(next(texts))
        with open(parts[i % len(parts)], "a") as out:
            out.write(json.dumps({"text": "\n\n".join(doc)}) + "\n")
    (web / "long.done").touch()


def _mb_documents(out: Path) -> None:
    """`out/part*.jsonl`: MB_DOCUMENTS distinct whole Python source files (2,000 characters to 1 MB) and MB_LONG
    documents of 1.0-1.6 MB joined from other source files, spread evenly, cut into files of about
    MB_PARTITION_CHARS."""
    from .corpus import source_files

    if (out / "done").exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    files = source_files()
    distinct: dict[str, None] = {}  # the raw asset keeps one of identical documents
    texts = (f.read_text(errors="replace") for f in files)
    while len(distinct) < MB_DOCUMENTS:
        text = next(texts)
        if 2000 <= len(text) < 1 << 20:
            distinct[text] = None
    docs = list(distinct)
    spare = (t for t in (f.read_text(errors="replace") for f in reversed(files)) if len(t) < 1 << 18)
    for i in range(MB_LONG):
        long = []
        while sum(map(len, long)) < (1 << 20) + i * 40_000:
            long.append(next(spare))
        docs.insert((i * 2 + 1) * len(docs) // (MB_LONG * 2), "\n\n".join(long))
    part, chars, lines = 0, 0, []
    for doc in docs + [None]:
        if doc is None or (chars and chars + len(doc) > MB_PARTITION_CHARS):
            (out / f"part{part:03d}.jsonl").write_text("".join(lines))
            part, chars, lines = part + 1, 0, []
        if doc is not None:
            lines.append(json.dumps({"text": doc}) + "\n")
            chars += len(doc)
    (out / "done").touch()


def _raw_partitions(store, source: str, folder: Path) -> list[str]:
    """Raw partitions of `folder/*.jsonl` in the store (the raw asset's own code), one per file; their keys."""
    from shard_assets.lib.raw_writer import write_raw_partition
    from shard_assets.lib.sources.listing import list_source_files
    from shard_assets.lib.spec import parse_spec

    spec = parse_spec(
        {"name": "bench", "min_chars": 1, "sources": [{"name": source, "uri": f"{folder}/*.jsonl", "format": "jsonl"}]},
        "bench",
    )
    keys = []
    for f in list_source_files(spec.sources[0]):
        key = f"raw/{source}/{f.part}.parquet"
        if not store.exists(key):
            with tempfile.TemporaryDirectory() as tmp:
                write_raw_partition(spec, f, Path(tmp) / "r.parquet")
                store.put_file(key, Path(tmp) / "r.parquet")
        keys.append(key)
    return keys


def _prepare(size, work: Path) -> tuple[Path, list[str], str]:
    """Raw partitions (the raw asset's own code) and a byte-level BPE trained on part of them."""
    from shard_assets.lib.spec import TokenizerSpec
    from shard_assets.lib.store import LocalFolderStore
    from shard_assets.lib.tokenizer import build_tokenizer

    from .corpus import build_corpus

    build_corpus(work / "corpus", size.corpus_mb, 1)  # one partition: the one process measured encodes all of it
    _web_documents(work / "corpus", work / "web")
    _long_documents(work / "web")
    store = LocalFolderStore(work / "store")
    keys = _raw_partitions(store, "py", work / "web")
    tok_path = work / "tokenizer.json"
    if not tok_path.exists():
        texts = itertools.chain.from_iterable(_texts(store.path(k)) for k in keys)
        text, _ = build_tokenizer(TokenizerSpec(vocab_size=VOCAB, train_max_bytes=16 << 20), texts)
        tok_path.write_text(text)
    return work / "store", keys, tok_path.read_text()


def _texts(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["text"]).column(0).to_pylist()


def _record(tok_json: str):
    from shard_assets.lib.records import TokenizerRecord
    from shard_assets.lib.tokenizer import fingerprint_of, load_tokenizer
    from shard_loader.format import token_dtype_for

    vocab = load_tokenizer(tok_json).get_vocab_size()
    return TokenizerRecord("bench", fingerprint_of(tok_json), vocab, 0, token_dtype_for(vocab))


def _tiktoken(tok_json: str):
    """tiktoken with ranks converted from the byte-level vocab (GPT-2's bytes_to_unicode): measured, not used by the
    build (it aborts the process on ~1M consecutive spaces and is slower than fastokens)."""
    from importlib.metadata import version as package_version

    import tiktoken

    from shard_assets.lib.encoders import GPT2_PATTERN, Encoded, Encoder

    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = [b for b in range(256) if b not in printable]
    byte_of = {chr(b): b for b in printable} | {chr(256 + i): b for i, b in enumerate(extra)}
    config = json.loads(tok_json)
    ranks = {bytes(byte_of[c] for c in token): rank for token, rank in config["model"]["vocab"].items()}
    encoding = tiktoken.Encoding("bench", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})

    class Tiktoken(Encoder):
        name, version, reason = "tiktoken", package_version("tiktoken"), "benchmark candidate"

        def _encode(self, texts):
            ids = [encoding.encode_ordinary(t) for t in texts]
            lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            return Encoded(
                np.fromiter(itertools.chain.from_iterable(ids), dtype=np.uint32, count=int(lengths.sum())), lengths
            )

    return Tiktoken()


def _differing(got, expected) -> int:
    """Documents whose ids differ between two `Encoded` of the same texts."""
    return sum(not np.array_equal(got.document(i), expected.document(i)) for i in range(len(expected.lengths)))


def _shard_differing(root: Path, key: str, shards: dict, expected: list[np.ndarray], val_fraction: float) -> int:
    """Documents of a published partition whose ids (EOD stripped) differ from the reference's ids of each document."""
    import pyarrow.parquet as pq

    from shard_assets.lib.text import is_val

    val = is_val(pq.read_table(root / key, columns=["doc_hash"]).column(0).to_numpy(), val_fraction)
    differing = 0
    for split, docs in (("train", np.flatnonzero(~val)), ("val", np.flatnonzero(val))):
        tokens = np.load(root / shards[split]["npy"], mmap_mode="r")
        offsets = np.fromfile(root / shards[split]["bin"], dtype="<i8")
        for j, doc in enumerate(docs):
            got = tokens[offsets[j] : offsets[j + 1]]
            differing += got[-1] != 0 or not np.array_equal(got[:-1], expected[doc])
    return differing


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _publish(store_root: Path, key: str, engine, reference, record, keep: bool = False) -> tuple[dict, object]:
    """The asset's work on one raw partition into a fresh store (raw hard-linked in), so every repetition uploads:
    encode behind the guard, then upload and record. With `keep`, the shards are copied into `store_root` to be
    checked."""
    import shutil

    from shard_assets.lib.encoding import EncodeSettings
    from shard_assets.lib.records import RawRecord, SourceFileRef
    from shard_assets.lib.shard_build import TokenizeJob, build_partition_shards, upload_partition
    from shard_assets.lib.store import LocalFolderStore

    out = Path(tempfile.mkdtemp(prefix="published-", dir=store_root.parent))
    try:
        (out / key).parent.mkdir(parents=True)
        os.link(store_root / key, out / key)
        store, stem = LocalFolderStore(out), Path(key).stem
        raw = RawRecord(stem, "py", SourceFileRef(key, "-"), key, "-", 0, "-", "bench")
        with tempfile.TemporaryDirectory() as tmp:
            job = TokenizeJob(
                store,
                record,
                engine,
                reference,
                EncodeSettings(record.eod_id, record.token_dtype, 0.01, 1000),
                "bench",
                "bench",
            )
            built = build_partition_shards(job, raw, Path(tmp))
            upload_partition(store, built)
        shards = {
            split: {"npy": e.npy.key, "bin": e.bin.key, "tokens": e.tokens, "documents": e.documents}
            for split, e in built.record.shards.items()
        }
        if keep:
            for entry in built.record.shards.values():
                for ref in (entry.npy, entry.bin):
                    (store_root / ref.key).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(out / ref.key, store_root / ref.key)
        return shards, built.stats.guard
    finally:
        shutil.rmtree(out)


def _hash_npy(path: Path, repetitions: int) -> dict:
    """Seconds to take a closed shard's sha256: re-reading the file (before) against mmap of the page cache
    (ShardWriter.close), interleaved."""
    import hashlib
    import mmap

    def reread():
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()

    def mapped():
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as pages:
            return hashlib.sha256(pages).hexdigest()

    seconds: dict[str, list[float]] = {"re-read": [], "mmap": []}
    for rep in range(repetitions):
        for name, fn in (("re-read", reread), ("mmap", mapped))[:: 1 if rep % 2 else -1]:
            started = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - started)
    return {"bytes": path.stat().st_size, "seconds": seconds}


def _alone(encoder, batches: list, outputs: dict[str, list]):
    """A variant: the encoder alone over every batch, its encodings kept in `outputs` under its name."""

    def encode_all():
        outputs[encoder.name] = [encoder.encode(b) for b in batches]
        return sum(int(e.lengths.sum()) for e in outputs[encoder.name])

    return encode_all


def _interleaved(variants: dict, repetitions: int) -> dict[str, list[float]]:
    """Tokens per second of each variant (a call returning its tokens), every one once per repetition, the order
    rotating."""
    names, rates = list(variants), {name: [] for name in variants}
    for rep in range(repetitions):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            started = time.perf_counter()
            tokens = variants[name]()
            rates[name].append(tokens / (time.perf_counter() - started))
    return rates


def measure(store_root: str, key: str, key_10x: str, tok_json: str, repetitions: int) -> dict:
    """In this process, pinned to one core (the reader and guard threads inherit the pin): every variant once
    per repetition, the order rotating."""
    from shard_assets.lib.encoders import ReferenceEncoder, select_encoder
    from shard_assets.lib.encoding import by_size

    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    root, record = Path(store_root), _record(tok_json)
    reference, engine, candidate = ReferenceEncoder(tok_json), select_encoder(tok_json), _tiktoken(tok_json)
    texts = _texts(root / key)
    batches = [texts[s] for s in by_size(texts)]
    outputs: dict[str, list] = {}
    published: dict[str, tuple] = {}

    def hot_path(raw_key, guarded=True):
        def publish():
            shards, guard = _publish(root, raw_key, engine, reference if guarded else engine, record, keep=guarded)
            if guarded:
                published[raw_key] = (shards, guard)
            return sum(s["tokens"] - s["documents"] for s in shards.values())

        return publish

    engine_name = f"{engine.name} alone"
    candidate_name = f"{candidate.name} alone (not used)"
    variants = {
        REFERENCE: _alone(reference, batches, outputs),
        engine_name: _alone(engine, batches, outputs),
        candidate_name: _alone(candidate, batches, outputs),
        HOT: hot_path(key),
        HOT_10X: hot_path(key_10x),
        HOT_10X_UNGUARDED: hot_path(key_10x, guarded=False),
    }
    rates = _interleaved(variants, repetitions)
    npy_sha256 = _hash_npy(root / published[key_10x][0]["train"]["npy"], repetitions)
    documents = [e.document(i) for e in outputs[reference.name] for i in range(len(e.lengths))]
    differing = {
        REFERENCE: 0,
        engine_name: sum(_differing(got, e) for got, e in zip(outputs[engine.name], outputs[reference.name])),
        candidate_name: sum(_differing(got, e) for got, e in zip(outputs[candidate.name], outputs[reference.name])),
        HOT: _shard_differing(root, key, published[key][0], documents, 0.01),
        HOT_10X: _shard_differing(root, key_10x, published[key_10x][0], documents * 10, 0.01),
    }
    per_rep = lambda a, b: _spread([x / y for x, y in zip(rates[a], rates[b])])  # noqa: E731
    return {
        "engine": {k: v for k, v in published[key][1].to_dict().items() if k.startswith("engine")},
        "guard": {name: published[k][1].to_dict() for name, k in ((HOT, key), (HOT_10X, key_10x))},
        "documents": len(texts),
        "longest_document_chars": max(map(len, texts)),
        "tokens": len(documents) and int(sum(map(len, documents))),
        "rates": rates,
        "npy_sha256": npy_sha256,
        "differing": differing,
        "ratios": {
            "asset / engine alone": per_rep(HOT, engine_name),
            "asset 10x / engine alone": per_rep(HOT_10X, engine_name),
            "asset 10x, guard off / engine alone": per_rep(HOT_10X_UNGUARDED, engine_name),
            "asset 10x / asset 10x guard off (1 - the guard's share of the time)": per_rep(HOT_10X, HOT_10X_UNGUARDED),
            "asset / reference": per_rep(HOT, REFERENCE),
            "asset 10x / reference": per_rep(HOT_10X, REFERENCE),
            "engine alone / reference": per_rep(engine_name, REFERENCE),
        },
    }


MB_ASSET = "asset, MB-document corpus"
MB_UNGUARDED = "asset, MB-document corpus, guard off (not a build mode)"


def _whole_document_sample(lengths: np.ndarray, chars: np.ndarray, stride: int) -> int:
    """Tokens the guard before pieces and budget re-encoded: every `stride`-th document and the longest, whole."""
    longest = int(chars.argmax())
    return int(lengths[::stride].sum()) + (int(lengths[longest]) if longest % stride else 0)


def measure_mb(store_root: str, keys: list[str], tok_json: str, repetitions: int) -> dict:
    """The MB-document corpus, in this process pinned to one core, variants interleaved: the reference and the engine
    alone over every partition's texts in memory, and the asset over every partition, with the guard and without."""
    from shard_assets.lib.encoders import ExactnessGuard, ReferenceEncoder, select_encoder
    from shard_assets.lib.encoding import by_size

    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    root, record = Path(store_root), _record(tok_json)
    reference, engine = ReferenceEncoder(tok_json), select_encoder(tok_json)
    texts = {key: _texts(root / key) for key in keys}
    batches = [texts[key][s] for key in keys for s in by_size(texts[key])]
    outputs: dict[str, list] = {}
    published: dict[str, tuple] = {}

    def asset(guarded):
        def publish_all():
            tokens = 0
            for key in keys:
                shards, guard = _publish(root, key, engine, reference if guarded else engine, record, keep=guarded)
                if guarded:
                    published[key] = (shards, guard)
                tokens += sum(s["tokens"] - s["documents"] for s in shards.values())
            return tokens

        return publish_all

    engine_name = f"{engine.name} alone, MB-document corpus"
    reference_name = f"{REFERENCE}, MB-document corpus"
    rates = _interleaved(
        {
            reference_name: _alone(reference, batches, outputs),
            engine_name: _alone(engine, batches, outputs),
            MB_ASSET: asset(True),
            MB_UNGUARDED: asset(False),
        },
        repetitions,
    )
    documents = [e.document(i) for e in outputs[reference.name] for i in range(len(e.lengths))]
    engine_differing = sum(_differing(got, e) for got, e in zip(outputs[engine.name], outputs[reference.name]))
    partitions, first = [], 0
    for key in keys:
        n = len(texts[key])
        expected = documents[first : first + n]
        lengths, chars = np.array(list(map(len, expected))), np.array(list(map(len, texts[key])))
        guard = published[key][1]
        partitions.append(
            {
                "key": key,
                "documents": n,
                "tokens": int(lengths.sum()),
                "over_1mb": int((chars > 1 << 20).sum()),
                "longest_chars": int(chars.max()),
                "guard": guard.to_dict(),
                "share": guard.sampled_tokens / guard.tokens,
                "share_before": _whole_document_sample(
                    lengths, chars, ExactnessGuard(engine, engine, "before", n).stride
                )
                / int(lengths.sum()),
                "differing": _shard_differing(root, key, published[key][0], expected, 0.01),
            }
        )
        first += n
    per_rep = lambda a, b: _spread([x / y for x, y in zip(rates[a], rates[b])])  # noqa: E731
    tokens = sum(p["tokens"] for p in partitions)
    return {
        "partitions": partitions,
        "rates": rates,
        "engine_differing": engine_differing,
        "share": sum(p["guard"]["sampled_tokens"] for p in partitions) / tokens,
        "share_before": sum(p["share_before"] * p["tokens"] for p in partitions) / tokens,
        "ratios": {
            "asset / engine alone": per_rep(MB_ASSET, engine_name),
            "asset / reference": per_rep(MB_ASSET, reference_name),
            "asset, guard off / engine alone": per_rep(MB_UNGUARDED, engine_name),
            "asset / asset guard off (1 - the guard's share of the time)": per_rep(MB_ASSET, MB_UNGUARDED),
            "engine alone / reference": per_rep(engine_name, reference_name),
        },
    }


def mb_summary(result: dict, repetitions: int, rss: int) -> list[dict]:
    """Rows for the MB-document corpus."""
    parts = result["partitions"]
    shares = [p["share"] for p in parts]
    rows = [
        {
            "figure": "MB-document corpus",
            "value": (
                f"{sum(p['documents'] for p in parts):,} documents ({sum(p['over_1mb'] for p in parts)} over 1 MB, "
                f"longest {max(p['longest_chars'] for p in parts) / 1e6:.1f}M characters), "
                f"{sum(p['tokens'] for p in parts):,} tokens in {len(parts)} partitions of "
                f"{min(p['tokens'] for p in parts) / 1e6:.1f}-{max(p['tokens'] for p in parts) / 1e6:.1f}M tokens"
            ),
        },
        {
            "figure": (
                "MB-document corpus: tokens the guard re-encodes with the reference, all partitions (per partition "
                "min-max)"
            ),
            "value": (
                f"{result['share']:.1%} ({min(shares):.1%}-{max(shares):.1%}); the whole-document sample before pieces "
                f"and budget: {result['share_before']:.1%}"
            ),
            "target": "a few percent",
        },
    ]
    rows += [
        {
            "figure": f"{name}, tokens/s on 1 core (median of {repetitions}, min-max)",
            "value": f"{statistics.median(r) / 1e6:.2f}M ({min(r) / 1e6:.2f}-{max(r) / 1e6:.2f}M)",
        }
        for name, r in result["rates"].items()
    ]
    rows += [
        {
            "figure": f"MB-document corpus: {name} (median of per-repetition ratios, min-max)",
            "value": f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})",
        }
        for name, r in result["ratios"].items()
    ]
    differing = result["engine_differing"] + sum(p["differing"] for p in parts)
    rows += [
        {
            "figure": (
                "MB-document corpus: documents differing from the whole-document reference (engine alone, published "
                "shards)"
            ),
            "value": str(differing),
            "target": "0",
        },
        {
            "figure": "MB-document corpus: peak RSS of the asset on the partition holding the longest document",
            "value": f"{rss / 2**20:.0f} MiB",
        },
    ]
    return rows


WORKER = """
import json, os, sys, time
from pathlib import Path
from benchmarks.bench_tokenize import _publish, _record, _texts
from shard_assets.lib.encoders import ReferenceEncoder, select_encoder
from shard_assets.lib.encoding import by_size
args = json.loads(sys.stdin.readline())
if args["core"] is not None:
    os.sched_setaffinity(0, {args["core"]})
root, tok_json = Path(args["store_root"]), args["tok_json"]
engine, reference, record = select_encoder(tok_json), ReferenceEncoder(tok_json), _record(tok_json)
texts = _texts(root / args["key"])
batches = [texts[s] for s in by_size(texts)]
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "engine":
        tokens = sum(int(engine.encode(b).lengths.sum()) for b in batches)
    else:
        shards, _ = _publish(root, args["key"], engine, reference, record)
        tokens = sum(s["tokens"] - s["documents"] for s in shards.values())
    print(tokens, flush=True)
"""


def measure_all_cores(store_root: str, key: str, tok_json: str, repetitions: int) -> dict:
    """One worker process per core, each pinned to its own, running the same variant at once on the same partition;
    and one unpinned process whose reader and guard threads may use the other cores. Interleaved, rotating."""
    cores = sorted(os.sched_getaffinity(0))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}

    def start(core):
        proc = subprocess.Popen(
            [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=root
        )
        proc.stdin.write(json.dumps({"core": core, "store_root": store_root, "key": key, "tok_json": tok_json}) + "\n")
        proc.stdin.flush()
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("a tokenize benchmark worker did not start")
        return proc

    pinned, free = [start(c) for c in cores], [start(None)]
    variants = {ENGINE_ALL: (pinned, "engine"), ASSET_ALL: (pinned, "asset"), ASSET_ONE_PROCESS: (free, "asset")}
    names, rates = list(variants), {name: [] for name in variants}
    try:
        for rep in range(repetitions):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                procs, command = variants[name]
                started = time.perf_counter()
                for p in procs:
                    p.stdin.write(command + "\n")
                    p.stdin.flush()
                tokens = sum(int(p.stdout.readline()) for p in procs)
                rates[name].append(tokens / (time.perf_counter() - started))
    finally:
        for p in pinned + free:
            p.stdin.close()
            p.wait(timeout=60)
    return {"cores": len(cores), "rates": rates}


MEASURE = """
import json, sys
from benchmarks.bench_tokenize import measure
args = json.loads(sys.stdin.read())
print(json.dumps(measure(**args)))
"""

RSS = (
    """
import sys
from pathlib import Path
from shard_assets.lib.encoders import ReferenceEncoder, select_encoder
from benchmarks.bench_tokenize import _publish, _record
tok_json = Path(sys.argv[3]).read_text()
_publish(Path(sys.argv[1]), sys.argv[2], select_encoder(tok_json), ReferenceEncoder(tok_json), _record(tok_json))
"""
    + f"print({PEAK_RSS_SNIPPET})\n"
)

MEASURE_MB = """
import json, sys
from benchmarks.bench_tokenize import measure_mb
args = json.loads(sys.stdin.read())
print(json.dumps(measure_mb(**args)))
"""

ALL_CORES = """
import json, sys
from benchmarks.bench_tokenize import measure_all_cores
print(json.dumps(measure_all_cores(**json.loads(sys.stdin.read()))))
"""


def _python(code: str, *args: str, stdin: str = "") -> str:
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", code, *args], input=stdin, capture_output=True, text=True, check=True, env=env, cwd=root
    ).stdout


def _repeated(store: Path, key: str, repeat: int) -> str:
    """A raw partition holding `repeat` copies of `key`'s documents, in the store; its key."""
    import pyarrow.parquet as pq

    repeated = key.replace(".parquet", f"-{repeat}x.parquet")
    if not (store / repeated).exists():
        table = pq.read_table(store / key)
        with pq.ParquetWriter(store / repeated, table.schema, compression="zstd") as w:
            for _ in range(repeat):
                w.write_table(table, 2000)
    return repeated


def _rss(store: Path, key: str, tokenizer_json: Path) -> int:
    """Peak RSS of the asset's work on one partition (encode, guard, write, upload), in a fresh process."""
    return int(_python(RSS, str(store), key, str(tokenizer_json)).split()[-1])


def _ratio_target(name: str) -> dict:
    if name.startswith("asset") and "engine alone" in name and "guard off" not in name:
        return {"target": ">= 0.8"}
    if name.startswith("asset") and name.endswith("reference"):
        return {
            "target": (
                f">= {20 * TODAY_OF_REFERENCE:.0f} (20x today's asset, which ran at {TODAY_OF_REFERENCE:.2f} of the "
                "reference)"
            )
        }
    return {}


def _core_hours(rate: float) -> str:
    return f"{TOKENS_2T / rate / 3600:,.0f}"


def run(size, work: Path) -> dict:
    from importlib.metadata import version

    work.mkdir(parents=True, exist_ok=True)
    store, keys, tok_json = _prepare(size, work)
    key_10x = _repeated(store, keys[0], 10)
    args = {
        "store_root": str(store),
        "key": keys[0],
        "key_10x": key_10x,
        "tok_json": tok_json,
        "repetitions": REPETITIONS,
    }
    result = json.loads(_python(MEASURE, stdin=json.dumps(args)))
    cores = json.loads(
        _python(
            ALL_CORES,
            stdin=json.dumps({k: args[k] for k in ("store_root", "tok_json", "repetitions")} | {"key": key_10x}),
        )
    )
    rss1, rss10 = _rss(store, keys[0], work / "tokenizer.json"), _rss(store, key_10x, work / "tokenizer.json")
    mb, mb_rss = _mb_corpus(work, tok_json)
    rates = {name: statistics.median(r) for name, r in result["rates"].items()}
    spread = {name: f"{min(r) / 1e6:.2f}-{max(r) / 1e6:.2f}M" for name, r in result["rates"].items()}
    summary = [
        {
            "figure": f"{name}, tokens/s on 1 core (median of {REPETITIONS}, min-max)",
            "value": f"{rate / 1e6:.2f}M ({spread[name]}); 2T tokens = {_core_hours(rate)} core-hours"
            + (f"; {result['differing'][name]} documents differ" if name in result["differing"] else ""),
        }
        for name, rate in rates.items()
    ]
    summary += [
        {
            "figure": f"{name} (median of per-repetition ratios, min-max)",
            "value": f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})",
            **_ratio_target(name),
        }
        for name, r in result["ratios"].items()
    ]
    h = result["npy_sha256"]
    ratio = [m / r for m, r in zip(h["seconds"]["mmap"], h["seconds"]["re-read"])]
    summary.append(
        {
            "figure": (
                f"sha256 of the 10x partition's train .npy ({h['bytes'] / 2**20:.0f} MiB): mmap of the page cache "
                "(used) / re-read (before) (median of per-repetition ratios, min-max)"
            ),
            "value": (
                f"{statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f}); "
                f"{statistics.median(h['seconds']['mmap']):.3f} s vs {statistics.median(h['seconds']['re-read']):.3f} s"
            ),
        }
    )
    n = cores["cores"]
    for name, r in cores["rates"].items():
        rate = statistics.median(r)
        summary.append(
            {
                "figure": f"{name}, tokens/s on {n} cores in all (median of {REPETITIONS}, min-max)",
                "value": (
                    f"{rate / 1e6:.2f}M ({min(r) / 1e6:.2f}-{max(r) / 1e6:.2f}M) = {rate / n / 1e6:.2f}M per core; 2T "
                    f"tokens = {_core_hours(rate / n)} core-hours"
                ),
            }
        )
    per_rep = [a / e for a, e in zip(cores["rates"][ASSET_ALL], cores["rates"][ENGINE_ALL])]
    summary.append(
        {
            "figure": (
                f"asset 10x / engine alone, one process per core ({n}) (median of per-repetition ratios, min-max)"
            ),
            "value": f"{statistics.median(per_rep):.2f} ({min(per_rep):.2f}-{max(per_rep):.2f})",
            "target": ">= 0.8",
        }
    )
    summary += [
        {
            "figure": f"{name} / today's asset (0.40M tokens/s per core)",
            "value": f"{rates[name] / TODAY_PER_CORE:.1f}x",
            "target": ">= 20x",
        }
        for name in (HOT, HOT_10X)
    ]
    summary += [
        {
            "figure": (
                f"{name}: tokens the guard re-encodes with the reference (1% of documents and the longest, within 2% "
                "of the tokens + 8K)"
            ),
            "value": f"{g['sampled_tokens'] / g['tokens']:.1%} ({g['sampled']:,} of {g['documents']:,} documents)",
        }
        for name, g in result["guard"].items()
    ]
    summary += [
        {
            "figure": "documents differing from the whole-document reference, all variants",
            "value": str(sum(result["differing"].values())),
            "target": "0",
        },
        {
            "figure": "corpus (one partition)",
            "value": (
                f"{result['documents']:,} documents, {result['tokens']:,} tokens, longest "
                f"{result['longest_document_chars'] / 1e6:.1f}M characters; vocab {VOCAB:,}"
            ),
        },
        {
            "figure": "engine",
            "value": (
                f"{result['engine']['engine']} {result['engine']['engine_version']} (tokenizers "
                f"{version('tokenizers')})"
            ),
        },
        {
            "figure": "peak RSS of the asset (encode, guard, write, upload), 1x / 10x a partition",
            "value": f"{rss1 / 2**20:.0f} MiB / {rss10 / 2**20:.0f} MiB",
            "target": "flat",
        },
    ]
    summary += mb_summary(mb, REPETITIONS, mb_rss)
    return {
        **result,
        "all_cores": cores,
        "repetitions": REPETITIONS,
        "peak_rss_1x_bytes": rss1,
        "peak_rss_10x_bytes": rss10,
        "mb_corpus": mb,
        "mb_peak_rss_bytes": mb_rss,
        "summary": summary,
    }


def _mb_corpus(work: Path, tok_json: str) -> tuple[dict, int]:
    """The MB-document corpus's raw partitions, measured in a fresh process; and the asset's peak RSS on the partition
    holding the longest document."""
    from shard_assets.lib.store import LocalFolderStore

    _mb_documents(work / "mb")
    store = LocalFolderStore(work / "store")
    keys = _raw_partitions(store, "mb", work / "mb")
    result = json.loads(
        _python(
            MEASURE_MB,
            stdin=json.dumps(
                {"store_root": str(work / "store"), "keys": keys, "tok_json": tok_json, "repetitions": REPETITIONS}
            ),
        )
    )
    longest = max(result["partitions"], key=lambda p: p["longest_chars"])["key"]
    return result, _rss(work / "store", longest, work / "tokenizer.json")
