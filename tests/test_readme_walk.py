"""The README as a new user follows it (#33): in one fresh clone, every fenced block in the order written: each bash
block run (the first is `scripts/demo`), each TOML block headed by its path (`# data/...`) written there, each
Python block run with the clone's .venv. A block this machine cannot run (a cluster, R2, the Hub, a server that
waits) is named below with the test that runs it instead; an entry that matches no block fails the test."""

from __future__ import annotations

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
    "scripts/demo                      # once": "starts the UI and waits: tests/test_ui.py",
    "# my-dataset.toml": "a Hugging Face Hub preset (the machine reaches no Hub)",
    "export SHARD_DATASET_SPEC=my-dataset.toml": "builds the Hub preset above",
    "export DATASET_STORE=r2": "needs an R2 bucket: tests/test_readme_r2.py runs it on SeaweedFS",
    "export R2_DATASET_ACCOUNT_ID=<account id>": "needs an R2 bucket: tests/test_readme_r2.py",
    "import os": "needs a model and a checkpoint path: tests/test_readme_training.py",
    "srun --nodes=4": "needs a Slurm cluster with GPUs",
    "srun --ntasks=16": "needs a Slurm cluster: tests/test_slurm.py runs two such tasks",
    "[tokenizer]": "a fragment of the specs the next block writes",
    "[dedup]": "a fragment of a spec's settings: tests/test_dedup.py builds with exact, near and no dedup",
    "scripts/bench --size small": "about an hour: tests/test_benchmarks.py runs each benchmark small",
}


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
