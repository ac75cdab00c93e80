"""The quality filters (#44) against their reference: CPU seconds per million documents of the builder's FineWeb
recipe (`filter_documents` over batches of 1,000, its spaCy guard on) and of datatrove's (LanguageFilter on the same
lid.176.ftz, GopherRepetitionFilter, GopherQualityFilter, C4QualityFilter(filter_no_terminal_punct=False),
FineWebQualityFilter, spaCy's English words) on the same held-out web-like documents (tests/support/filter_corpus.py,
a seed the tests do not use), and how many documents' decisions and kept texts differ, by rule.

Each measurement runs in a fresh process (no cache warmed by an earlier one; imports and model loading not counted);
the two alternate within each repetition; the ratio is the median of per-repetition ratios. Run alone:
python -m benchmarks.bench_filters [--documents 2000] [--repeat 5]"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

from .machine import machine_info

ROOT = Path(__file__).resolve().parents[1]
BATCH = 1000
MEASURE = """
import json, sys, time
from shard_assets.lib.curation.filters import filter_documents, parse_filters
from tests.support.filter_corpus import web_like
from tests.support.filter_reference import reference_decide
variant, documents, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
docs = web_like(documents, seed=4402, planted=0.4)
settings = parse_filters({"preset": "fineweb"}, "[filters]")
if variant == "builder":
    filter_documents(["warm the model up."], parse_filters({"language": {}}, "[filters]"))
    started = time.process_time()
    decided = []
    for i in range(0, len(docs), %d):
        o = filter_documents(docs[i : i + %d], settings)
        decided += list(zip(o.texts, o.dropped_by))
else:
    reference_decide(["warm the model up."], settings)  # lid.176 and spaCy loaded before the clock starts
    started = time.process_time()
    decided = reference_decide(docs, settings)
cpu = time.process_time() - started
json.dump({"cpu_s": cpu, "decided": decided, "chars": sum(map(len, docs))}, open(out, "w"))
""" % (BATCH, BATCH)


def _measure(variant: str, documents: int, out: Path) -> dict:
    subprocess.run([sys.executable, "-c", MEASURE, variant, str(documents), str(out)], cwd=ROOT, check=True)
    return json.loads(out.read_text())


def run(size, work: Path, documents: int = 2000, repeat: int = 5) -> dict:
    """Builder and reference, alternating, `repeat` times on `documents` documents."""
    work.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {"builder": [], "datatrove": []}
    for _ in range(repeat):
        for variant in runs:
            runs[variant].append(_measure(variant, documents, work / f"{variant}.json"))
    ours, ref = runs["builder"][0]["decided"], runs["datatrove"][0]["decided"]
    differ = Counter(f"{r[1]} -> {o[1]}" if o[1] != r[1] else f"{r[1]}: text" for o, r in zip(ours, ref) if o != r)
    per_million = {v: statistics.median(r["cpu_s"] for r in rs) / documents * 1e6 for v, rs in runs.items()}
    ratio = statistics.median(o["cpu_s"] / r["cpu_s"] for o, r in zip(runs["builder"], runs["datatrove"]))
    dropped = Counter(str(d[1]) for d in ours)
    results = {
        "documents": documents,
        "characters": runs["builder"][0]["chars"],
        "repetitions": repeat,
        "cpu_s": {v: [r["cpu_s"] for r in rs] for v, rs in runs.items()},
        "cpu_s_per_million_documents": per_million,
        "ratio_median": ratio,
        "agreement": 1 - sum(differ.values()) / documents,
        "differences": dict(differ),
        "decided_by_rule": dict(dropped),
    }
    summary = [
        {
            "figure": "CPU-s per million documents: builder / datatrove (median)",
            "value": f"{per_million['builder']:,.0f} / {per_million['datatrove']:,.0f}",
        },
        {
            "figure": "builder / datatrove CPU (median of per-repetition ratios)",
            "value": f"{ratio:.3f}",
            "target": "<= 0.2",
        },
        {
            "figure": "documents whose decision or kept text differs from datatrove's",
            "value": f"{sum(differ.values())} of {documents} ({results['agreement']:.2%} agree)",
            "target": ">= 99% agree",
        },
    ]
    return {"results": results, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_filters")
    parser.add_argument("--documents", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    out = run(None, ROOT / "benchmarks/results/work/filters", args.documents, args.repeat)
    for row in out["summary"]:
        print(f"{row['figure']}: {row['value']}")
    result = {"machine": machine_info(), **out}
    (ROOT / "benchmarks/results/filters.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
