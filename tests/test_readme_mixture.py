"""The README's "Train on a mixture", run verbatim: its tokenizer table in three dataset specs (built by the runner
from different sources), its mixture spec and its `shard-assets mix` command; and its training loop, which needs
the loader to read mixture URLs (the mix-loader branch)."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.support.mixtures import ROOT, build_corpus, dagster_home

pytestmark = pytest.mark.integration


def readme_block(marker: str) -> str:
    text = (ROOT / "README.md").read_text()
    return re.search(rf"<!-- {marker} -->\n```\w+\n(.*?)```", text, re.S).group(1)


def readme_loop() -> str:
    text = (ROOT / "README.md").read_text()
    return re.search(
        r"<!-- mixture-train:start -->\n```python\n(.*?)```\n<!-- mixture-train:end -->", text, re.S
    ).group(1)


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A folder laid out as the README's: data/specs (the README's tokenizer table), data/mixtures/blend.toml (the
    README's spec) and `mix` run as the README's bash block, from a folder whose .venv is this checkout's."""
    cwd = tmp_path_factory.mktemp("readme")
    build_corpus(cwd / "data", names=("web", "code", "math"), tokenizer_block=readme_block("mixture-tokenizer"))
    (cwd / "data/mixtures").mkdir()
    (cwd / "data/mixtures/blend.toml").write_text(readme_block("mixture-spec"))
    (cwd / ".venv").symlink_to(ROOT / ".venv")
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home(cwd)), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        ["bash", "-e", "-c", readme_block("mixture-publish")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return cwd, done


def test_the_readme_tokenizer_table_gives_every_dataset_one_fingerprint(published):
    cwd, _ = published
    specs = [(cwd / f"data/specs/{n}.toml").read_text() for n in ("web", "code", "math")]
    assert all(readme_block("mixture-tokenizer") in s for s in specs)
    fingerprints = {
        json.loads((cwd / f"data/store/{n}/manifest.json").read_text())["tokenizer"]["fingerprint"]
        for n in ("web", "code", "math")
    }
    assert len(fingerprints) == 1


def test_the_readme_mix_command_publishes_its_mixture(published):
    cwd, done = published
    assert done.returncode == 0, done.stdout + done.stderr
    live = json.loads((cwd / "data/store/mixtures/blend.json").read_text())
    assert [(c["name"], c["weight"]) for c in live["components"]] == [("web", 0.6), ("code", 0.3), ("math", 0.1)]
    assert live["lineage"]["tokens_per_epoch_from"] == {"train": "all_exhausted", "val": "all_exhausted"}
    passes = {
        c["name"]: c["weight"] * live["tokens_per_epoch"]["train"] / c["tokens"]["train"] for c in live["components"]
    }
    assert (
        min(passes.values()) >= 1 and 1 < passes["math"] <= 50
    )  # every component at least once; math repeats, within its cap
    assert "audits        5 of 5 passed" in done.stdout


def test_the_readme_training_loop_serves_the_weights(published):
    cwd, done = published
    assert done.returncode == 0, done.stderr
    run = subprocess.run([sys.executable, "-c", readme_loop()], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    shares = [float(x) for x in re.findall(r"[\d.]+", run.stdout.strip().splitlines()[-1])]
    assert shares == pytest.approx([0.6, 0.3, 0.1], abs=0.02)
