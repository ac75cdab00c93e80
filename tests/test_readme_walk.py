"""The README as a new user follows it (#33): in one fresh clone, every fenced block in the order written: each bash
block run (the first is `scripts/demo`), each TOML block headed by its path (`# data/...`) written there, each
Python block run with the clone's .venv. A block this machine cannot run (a cluster, R2, the Hub, a server that
waits) is named below with the test that runs it instead; an entry that matches no block fails the test.

Then docs/*.md in the same clone, in order: each JSON example has the keys of the file of its `format` the walk
published (the demo's manifest, the README's blend mixture), each TOML spec loads as `shard-assets mix` loads it, and
each block under a `<!-- name -->` marker is run verbatim by the test named in DOCS_RUN_BY (which must ask for that
marker); any other block fails the test."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from shard_assets.lib.mixture.audits import AUDITS as MIXTURE_AUDITS
from tests.support.clone import ROOT, fresh_clone, new_user_env
from tests.support.patience import HUNG

pytestmark = pytest.mark.system

BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
ELSEWHERE = {  # a block's first line -> why it is not run here, and what runs it
    "scripts/test": "the test suite itself",
    "scripts/demo                      # once": "starts the UI and waits: tests/builder/test_ui.py",
    "# my-dataset.toml": "a Hugging Face Hub preset (the machine reaches no Hub)",
    "export SHARD_DATASET_SPEC=my-dataset.toml": "builds the Hub preset above",
    "export DATASET_STORE=r2": "needs an R2 bucket: tests/test_readme_r2.py runs it on SeaweedFS",
    "export R2_DATASET_ACCOUNT_ID=<account id>": "needs an R2 bucket: tests/test_readme_r2.py",
    "import os": "needs a model and a checkpoint path: tests/test_readme_training.py",
    "srun --nodes=4": "needs a Slurm cluster with GPUs",
    "srun --ntasks=16": "needs a Slurm cluster: tests/cluster/test_slurm.py runs two such tasks",
    "[tokenizer]": "a fragment of the specs the next block writes",
    "[dedup]": "a fragment of a spec's settings: tests/builder/test_dedup.py builds with exact, near and no dedup",
    "[filters]": "a fragment of a spec's settings: tests/builder/test_filters_build.py builds with the preset",
    "[decontaminate]": "a fragment of a spec's settings: tests/builder/test_decontamination.py builds with it",
    "scripts/bench --size small": "about an hour: tests/test_benchmarks.py runs each benchmark small",
}


DOCS = ("docs/architecture.md", "docs/format.md", "docs/loader.md", "docs/deploy.md")
DOCS_RUN_BY = {  # a docs block's marker -> the test that runs it verbatim (on torchrun, Slurm, a UI)
    "stateful-dataloader": "test_standard_resume.py",
    "dcp": "test_standard_resume.py",
    "accelerate": "test_trainers.py",
    "hf-trainer": "test_trainers.py",
    "lightning": "test_trainers.py",
    "fabric": "test_trainers.py",
    "slurm-instance": "test_slurm.py",
    "slurm-services": "test_slurm.py",
    "slurm-build": "test_slurm.py",
}
DOCS_ELSEWHERE = {
    ".venv/bin/shard-assets dev": "starts the UI and waits: tests/builder/test_ui.py starts it as written"
}
DOCS_BLOCK = re.compile(r"(?:<!-- ([\w-]+?)(?::start)? -->\n)?^```(\w+)\n(.*?)^```", re.S | re.M)


NAMED = ("resolved_from",)  # maps keyed by the walk's own names: the example's keys are some of them


def same_keys(example: object, published: object, where: str) -> None:
    """The example's keys are the published document's, level by level (an example's `{"…": "…"}` stands for any)."""
    if isinstance(example, dict) and isinstance(published, dict) and example != {"…": "…"}:
        if where.endswith(NAMED):
            assert set(example) <= set(published), f"{where}: {sorted(example)} not in {sorted(published)}"
            return
        assert sorted(example) == sorted(published), f"{where}: {sorted(example)} != {sorted(published)}"
        for key in example:
            same_keys(example[key], published[key], f"{where}.{key}")
    elif isinstance(example, list) and isinstance(published, list) and example and published:
        same_keys(example[0], published[0], f"{where}[0]")


def walk_docs(clone) -> None:
    """docs/*.md's blocks in order, in the clone the README walk left (see the module's docstring)."""
    matched: list[str] = []
    published = {
        doc["format"]: doc
        for doc in (
            json.loads((clone / p).read_text()) for p in ("data/store/manifest.json", "data/store/mixtures/blend.json")
        )
    }
    for name in DOCS:
        for marker, language, body in DOCS_BLOCK.findall((ROOT / name).read_text()):
            if marker:
                runner = DOCS_RUN_BY[marker]
                assert f'"{marker}"' in next((ROOT / "tests").rglob(runner)).read_text(), (
                    f"{runner} does not run {marker}"
                )
            elif language == "json":
                example = json.loads(body)
                same_keys(example, published[example["format"]], f"{name} {example['format']} example")
            elif language == "toml":
                (clone / "docs-example.toml").write_text(body)
                code = "from shard_assets.lib.mixture.spec import load_mixture_spec as load; load('docs-example.toml')"
                done = subprocess.run([".venv/bin/python", "-c", code], cwd=clone, capture_output=True, text=True)
                assert done.returncode == 0, f"{name}: the TOML example does not load: {done.stderr[-2000:]}"
            elif key := next((k for k in DOCS_ELSEWHERE if body.startswith(k)), None):
                matched.append(key)
            else:
                raise AssertionError(f"{name}: a {language} block nobody runs: {body[:80]!r}")
    assert sorted(matched) == sorted(DOCS_ELSEWHERE), "DOCS_ELSEWHERE names a block the docs no longer have"


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block with a language, in order."""
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(text)]


def skipped(body: str) -> str | None:
    return next((key for key in ELSEWHERE if body.startswith(key)), None)


def test_every_readme_block_runs_in_order_in_a_fresh_clone(tmp_path):
    clone = fresh_clone(tmp_path / "clone")
    env, outputs, matched = new_user_env(), [], []
    for language, body in blocks((ROOT / "README.md").read_text()):
        if key := skipped(body):
            matched.append(key)
            continue
        if language == "toml":
            path = re.match(r"# (\S+\.toml)\n", body)
            assert path, f"a TOML block neither headed by its path nor named in ELSEWHERE: {body[:80]!r}"
            (clone / path.group(1)).parent.mkdir(parents=True, exist_ok=True)
            (clone / path.group(1)).write_text(body)
            continue
        command = (
            ["bash", "-e", "-o", "pipefail", "-c", body] if language == "bash" else [".venv/bin/python", "-c", body]
        )
        assert language in ("bash", "python"), f"a {language} block nobody runs: {body[:80]!r}"
        done = subprocess.run(command, cwd=clone, env=env, capture_output=True, text=True, timeout=HUNG)
        assert done.returncode == 0, f"{body}\nexit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        outputs.append((body, done))
    assert sorted(matched) == sorted(ELSEWHERE), "ELSEWHERE names a block the README no longer has"
    everything = "\n".join(d.stdout + d.stderr for _, d in outputs)
    assert "telemetry" not in everything.lower(), "Dagster's telemetry banner was printed"
    assert sorted(p.name for p in (clone / ".dagster_home").iterdir()) == ["code", "demo", "math", "web"]
    published = next(d for body, d in outputs if "shard-assets mix" in body)
    assert f"audits        {len(MIXTURE_AUDITS)} of {len(MIXTURE_AUDITS)} passed" in published.stdout, published.stdout
    shares = [float(x) for x in re.findall(r"[\d.]+", outputs[-1][1].stdout.strip().splitlines()[-1])]
    assert shares == pytest.approx([0.6, 0.3, 0.1], abs=0.02)
    walk_docs(clone)
