"""Issue 45: no published document shares a 13-word run with the eval sets. A held-out corpus where runs of 13 to 25
consecutive words of eval passages are planted in training documents, re-cased and re-punctuated, and runs of 8 to 11
words in others; a build with [decontaminate] publishes exactly the documents sharing no 13-gram (the truth computed
here on word tuples, not by the builder's hashes), and lineage's decontamination.dropped sums to the documents
dropped. A changed eval file re-runs decontamination and what follows, never ingest."""

import json
import random
import string
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

import shard_loader
from shard_assets.definitions import ASSETS
from shard_assets.lib.curation import decontamination, word_hash
from shard_assets.lib.spec import load_spec
from shard_assets.lib.verification import verify_live_version
from shard_assets.runner import build_dataset
from tests.builder.test_cli_errors import _cli, _one_line_error
from tests.support.build_helpers import published
from tests.support.dagster_helpers import tiny_resources, write_spec

pytestmark = pytest.mark.integration

SYLLABLES = "ka lo mi ne su ta re vo ba di fu go hi ju po ze".split()
DOCUMENTS, PASSAGES, N = 900, 40, 13


def _words(text: str) -> list[str]:
    """The janitor's rule, independently: lower-cased, ASCII punctuation removed, split on whitespace."""
    return text.lower().translate(str.maketrans("", "", string.punctuation)).split()


def _ngrams(text: str, n: int = N) -> set[tuple[str, ...]]:
    w = _words(text)
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def _disguised(rng: random.Random, words: list[str]) -> str:
    """A run of words re-cased and re-punctuated as a copy on the web would be."""
    out = []
    for w in words:
        w = rng.choice((w, w.upper(), w.capitalize(), w))
        out.append(rng.choice(("", "(", '"', "")) + w + rng.choice(("", ",", ".", "!", ";", ")", "", "")))
    return rng.choice((" ", "  ", "\n")).join(out)


class Corpus:
    """Eval sets (two JSONL files and a text file, one passage a line) and a training source of two files."""

    def __init__(self, root: Path, seed: int = 45):
        rng = random.Random(seed)
        vocab = sorted({"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(8000)})
        self.passages: dict[str, list[list[str]]] = {
            name: [[rng.choice(vocab) for _ in range(rng.randint(40, 90))] for _ in range(PASSAGES)]
            for name in ("arc", "mmlu", "trivia")
        }
        (root / "evals").mkdir(parents=True)
        for name in ("arc", "mmlu"):
            lines = (json.dumps({"text": " ".join(p).capitalize() + "."}) for p in self.passages[name])
            (root / "evals" / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
        (root / "evals" / "trivia.txt").write_text("\n".join(" ".join(p) for p in self.passages["trivia"]) + "\n")
        self.texts: list[str] = []
        for i in range(DOCUMENTS):
            words = [rng.choice(vocab) for _ in range(rng.randint(60, 200))]
            text = " ".join(words)
            if i % 3:  # a third clean; the others hold a run of 13-25 words, or of 8-11
                passage = rng.choice(rng.choice(list(self.passages.values())))
                length = rng.randint(13, 25) if i % 3 == 1 else rng.randint(8, 11)
                start = rng.randint(0, len(passage) - length)
                at = rng.randint(0, len(words))
                run = _disguised(rng, passage[start : start + length])
                text = " ".join([" ".join(words[:at]), run, " ".join(words[at:])]).strip()
            self.texts.append(f"Document {i}. {text}")
        (root / "src").mkdir()
        for part, texts in enumerate((self.texts[: DOCUMENTS // 2], self.texts[DOCUMENTS // 2 :])):
            (root / "src" / f"part{part}.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in texts) + "\n")

    def contaminated(self) -> set[str]:
        """The documents sharing a 13-gram with any passage, computed on word tuples."""
        grams = set().union(*(_ngrams(" ".join(p)) for ps in self.passages.values() for p in ps))
        return {t for t in self.texts if _ngrams(t) & grams}


def _spec(root: Path, decontaminate: str) -> Path:
    return write_spec(root / "spec.toml", f"{root}/src/*.jsonl", tables=f"{decontaminate}\n")


DECONTAMINATE = '[decontaminate]\nagainst = ["evals/*.jsonl", "evals/*.txt"]\n'


def _lineage(store: Path) -> tuple[dict, dict]:
    manifest = shard_loader.open_manifest(str(store))
    files = {f["partition"]: f for s in manifest.lineage()["sources"] for f in s["files"]}
    return manifest.manifest.lineage, files


def test_a_build_publishes_exactly_the_documents_sharing_no_13_gram_with_the_eval_sets(tmp_path):
    corpus = Corpus(tmp_path)
    truth = corpus.contaminated()
    assert 250 < len(truth) < 350  # the 13-25 word plants, and none of the 8-11 word ones
    spec = _spec(tmp_path, DECONTAMINATE)
    resources = tiny_resources(spec, tmp_path / "store")
    result = build_dataset(dg.DagsterInstance.ephemeral(), load_spec(spec), resources)
    kept = {t for splits in published(tmp_path / "store").values() for texts in splits.values() for t in texts}
    wrong = sum((t in kept) == (t in truth) for t in corpus.texts)  # published and contaminated, or neither
    assert wrong == 0, f"{wrong} of {DOCUMENTS} documents decided otherwise than the truth"
    assert sum(result.documents.values()) == DOCUMENTS - len(truth)
    summary, files = _lineage(tmp_path / "store")
    dropped = summary["decontamination"]["dropped"]
    assert set(dropped) == {"arc", "mmlu", "trivia"} and sum(dropped.values()) == len(truth)
    per_partition = [f["decontamination"]["dropped"] for f in files.values()]
    assert sum(sum(d.values()) for d in per_partition) == len(truth)
    assert all(
        f["decontamination"]["eval_version"] == summary["decontamination"]["eval_version"] for f in files.values()
    )
    samples = json.loads((tmp_path / "store" / files["web.part0"]["decontamination"]["samples"]).read_text())
    sample = samples["samples"][0]
    assert sample["matched"] and all(len(m.split()) == N for m in sample["matched"])
    assert all(m in " ".join(_words(sample["text"])) or len(sample["text"]) == 400 for m in sample["matched"])
    assert result.checks == {name: True for name in result.checks}
    assert verify_live_version(resources["store"].store()).problems == ()


def test_the_check_decides_a_document_alike_whatever_piece_and_chunk_of_the_batch_hold_it(tmp_path, monkeypatch):
    corpus = Corpus(tmp_path)
    index = decontamination.build_eval_index(load_spec(_spec(tmp_path, DECONTAMINATE)))
    longer = [" ".join(corpus.texts[i : i + 60]) for i in range(0, 300, 60)]  # 60 KB each, over many chunks
    texts = pa.array(corpus.texts + longer, pa.large_string())
    whole = index.contaminated(texts)
    truth = corpus.contaminated()
    assert [found >= 0 for found in whole[:DOCUMENTS]] == [t in truth for t in corpus.texts]
    monkeypatch.setattr(decontamination, "PIECE", 4096)  # a few documents a piece, a longer one alone
    monkeypatch.setattr(word_hash, "CHUNK", 4096)
    assert (index.contaminated(texts) == whole).all()


def test_a_changed_eval_file_reruns_decontamination_and_what_follows_never_ingest(tmp_path):
    corpus = Corpus(tmp_path)
    spec = _spec(tmp_path, DECONTAMINATE)
    resources = tiny_resources(spec, tmp_path / "store")
    inst = dg.DagsterInstance.ephemeral()
    first = build_dataset(inst, load_spec(spec), resources)
    clean = [t for t in corpus.texts if t not in corpus.contaminated()]
    leaked = clean[:7]  # eval passages now quote these documents
    with (tmp_path / "evals" / "mmlu.jsonl").open("a") as f:
        f.writelines(json.dumps({"text": " ".join(_words(t)[2:20])}) + "\n" for t in leaked)
    raw_records = sorted((tmp_path / "store" / "raw").rglob("*.json"))
    before = [p.read_bytes() for p in raw_records]
    selection = ["eval_index", "dedup", "tokenized_shards", "splits", "manifest"]
    for partition in ("web.part0", "web.part1"):
        dg.materialize(ASSETS, selection=selection[:3], partition_key=partition, instance=inst, resources=resources)
    dg.materialize(ASSETS, selection=selection[3:], instance=inst, resources=resources)
    assert [p.read_bytes() for p in raw_records] == before  # ingest did not run again
    kept = {t for splits in published(tmp_path / "store").values() for texts in splits.values() for t in texts}
    assert not kept & set(leaked) and kept == set(clean) - set(leaked)
    summary, _ = _lineage(tmp_path / "store")
    assert sum(summary["decontamination"]["dropped"].values()) == DOCUMENTS - len(clean) + len(leaked)
    assert shard_loader.open_manifest(str(tmp_path / "store")).manifest.version != first.version


@pytest.mark.parametrize(
    "against, files, pattern",
    [
        ('["evals/*.jsonl"]', {}, r"spec.toml: source '\[decontaminate\].against': no files match .*/evals/\*\.jsonl$"),
        ('["evals/*.jsonl"]', {"evals/a.jsonl": '{"text": "fine"}\nnot json\n'}, r"evals/a.jsonl:2: not a JSON object"),
        ('["evals/*.jsonl"]', {"evals/a.jsonl": '{"question": "no text"}\n'}, r"a.jsonl:1: field 'text' is missing"),
        ('["evals/*.txt"]\nngram = 5', {"evals/a.txt": "x\n"}, r"\[decontaminate\].ngram: .*between 8 and 50, got 5"),
        ('["evals/*.txt"]\nngram = 51', {"evals/a.txt": "x\n"}, r"\[decontaminate\].ngram: .*between 8 and 50, got 51"),
    ],
    ids=["no-match", "unreadable", "no-text-field", "ngram-low", "ngram-high"],
)
def test_bad_eval_sets_fail_the_build_in_one_line_before_anything_is_written(tmp_path, against, files, pattern):
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.jsonl").write_text('{"text": "a document long enough to keep around"}\n')
    spec = _spec(tmp_path, f"[decontaminate]\nagainst = {against}\n")
    _one_line_error(_cli("build", "--spec", str(spec), cwd=tmp_path), pattern)
    assert not (tmp_path / "data").exists() and not (tmp_path / ".dagster_home").exists()
