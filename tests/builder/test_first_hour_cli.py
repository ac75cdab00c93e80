"""A data engineer's first hour at the command line (#33): 25 realistic mistakes, typed as a user types them into
`.venv/bin/shard-assets` (and `shard-loader`) in the project folder or another one, each refused in one line
(`error: ...`, exit 2) that names what is wrong, before any work or any Dagster home is made. How fast each is
refused is measured by benchmarks/bench_cli_errors.py, not asserted here."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.mixture_files import Part, write_component, write_mixture
from tests.support.patience import HUNG

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SETTINGS = ("DAGSTER_HOME", "DATASET_STORE", "DATASET_STORE_ROOT", "S3_ENDPOINT_URL", "R2_DATASET_ACCOUNT_ID")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS and not k.startswith("SHARD_")}
    return {**env, "HF_HUB_OFFLINE": "1", **extra}


def _run(command: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess:
    """`command` as typed in a shell in `cwd` (the project's .venv/bin first on PATH, as after activating it)."""
    env = _env(**extra)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=HUNG)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project folder as a clone has it (workspace.yaml, dagster.yaml) with the demo written, a few mistaken files
    beside it, a published mixture (for shard-loader) and a listener on a port, as a first `shard-assets dev`."""
    folder = tmp_path_factory.mktemp("project")
    for name in ("workspace.yaml", "dagster.yaml"):
        shutil.copy(ROOT / name, folder / name)
    done = _run("shard-assets demo", folder)
    assert done.returncode == 0, done.stderr
    (folder / "notes.txt").write_text("not a folder\n")
    (folder / "typo.toml").write_text('name = "web"\n[[sources]\nuri = "*.jsonl"\n')
    demo = (folder / "data/demo/demo.toml").read_text()
    (folder / "extra.toml").write_text(demo.replace('name = "demo"', 'name = "demo"\nmax_docs = 3'))
    (folder / "fraction.toml").write_text(demo.replace("val_fraction = 0.05", "val_fraction = 1.5"))
    (folder / "blend.toml").write_text(
        'name = "blend"\n[[components]]\nmanifest = "data/store/web/manifest.json"\nweigth = 0.6\n'
    )
    (folder / "noname.toml").write_text('[[components]]\nmanifest = "x/manifest.json"\nweight = 1\n')
    write_component(folder / "pub", Part("web", (3000, 3000), 1.0, 0))
    write_mixture(folder / "pub", "mix", [Part("web", (3000, 3000), 1.0, 0)], 6000)
    return folder


@pytest.fixture(scope="module")
def busy_port():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


ELSEWHERE = "elsewhere"
MISTAKES = [  # (what a user typed, where, the environment they had, what the one line must say)
    ("shard-assets biuld", "", {}, r"invalid choice: 'biuld' \(choose from .*'build'"),
    ("shard-assets build --store notes.txt", "", {}, r"--store='notes.txt': .*notes.txt is a file, not a folder"),
    ("shard-assets discover --store notes.txt", "", {}, r"notes.txt is a file, not a folder"),
    ("shard-assets build", "", {"DATASET_STORE_ROOT": "notes.txt"}, r"DATASET_STORE_ROOT='notes.txt': .* is a file"),
    ("shard-assets build --spec typo.toml", "", {}, r"typo.toml: not valid TOML \(.*line 2"),
    ("shard-assets build --spec extra.toml", "", {}, r"extra.toml.*unknown field 'max_docs'"),
    ("shard-assets plan --spec fraction.toml", "", {}, r"val_fraction must be in \[0, 1\)"),
    ("shard-assets build --spec data/demo", "", {}, r"data/demo: a folder, not a dataset spec file"),
    ("shard-assets build --spec demo.toml", "", {}, r"demo.toml: dataset spec file not found"),
    ("shard-assets discover", "", {"SHARD_DATASET_SPEC": "nope.toml"}, r"nope.toml: dataset spec file not found"),
    (
        "shard-assets plan",
        ELSEWHERE,
        {},
        r"demo.toml: dataset spec file not found, and .*elsewhere is not the project folder .*pass --spec",
    ),
    ("shard-assets build --workers 0", "", {}, r"argument --workers: must be at least 1, got 0"),
    ("shard-assets build --seq-len abc", "", {}, r"argument --seq-len: expected a positive integer, got 'abc'"),
    ("shard-assets build data/demo/demo.toml", "", {}, r"unrecognized arguments: data/demo/demo.toml"),
    ("shard-assets build", "", {"DATASET_STORE": "r3"}, r"DATASET_STORE='r3' is not one of local, s3, r2"),
    ("shard-assets build", "", {"DATASET_STORE": "s3"}, r"DATASET_STORE=s3 needs DATASET_STORE_ROOT"),
    ("shard-assets build", "", {"DATASET_STORE": "r2"}, r"R2_DATASET_BUCKET_NAME is not set"),
    (
        "shard-assets build --store s3://bucket/web",
        "",
        {"S3_ENDPOINT_URL": "localhost:9000"},
        r"S3_ENDPOINT_URL='localhost:9000' has no scheme",
    ),
    ("shard-assets gc --max-age lots", "", {}, r"--max-age: 'lots' is not a duration"),
    ("shard-assets mix", "", {}, r"the following arguments are required: --spec"),
    ("shard-assets mix --spec blend.toml", "", {}, r"missing 'weight' \(a misspelling\? found 'weigth'"),
    ("shard-assets mix --spec noname.toml", "", {}, r"noname.toml: missing 'name'"),
    ("shard-assets dev --port 70000", "", {}, r"a TCP port is 1 to 65535, got 70000"),
    ("shard-assets dev", "", {"SHARD_MIXTURE_SPECS": "notes.txt"}, r"SHARD_MIXTURE_SPECS='notes.txt': .* is a file"),
    ("shard-assets dev", "", {"SHARD_MIXTURE_SPECS": "mixes"}, r"SHARD_MIXTURE_SPECS='mixes': the folder .* not exist"),
    ("shard-assets dev --port {port}", "", {}, r"port {port} on 127.0.0.1 is in use .*another `shard-assets dev`"),
    ("shard-assets demo --folder notes.txt", "", {}, r"--folder='notes.txt': .* is a file, not a folder"),
    ("shard-loader info pub/mixtures/mix.json --split typo", "", {}, r"tokens_per_epoch has no split 'typo'"),
]


@pytest.mark.parametrize("typed, where, env, says", MISTAKES, ids=[m[0] + " " + str(m[2]) for m in MISTAKES])
def test_a_mistake_is_refused_in_one_line(project, busy_port, tmp_path, typed, where, env, says):
    cwd = tmp_path / where if where else project
    cwd.mkdir(exist_ok=True)
    out = _run(typed.format(port=busy_port), cwd, **env)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert re.search(says.format(port=busy_port), lines[0]), lines[0]
    assert not out.stdout and not (cwd / ".dagster_home").exists() and not (cwd / "data/store").exists()


def test_a_relative_mixture_specs_folder_is_read_in_the_project_folder(tmp_path, monkeypatch):
    """As `shard-assets dev` runs the code location: the current directory is the Dagster home, the project folder is
    SHARD_PROJECT_ROOT, and a relative SHARD_MIXTURE_SPECS is found in the project (it was read in the home: none)."""
    from shard_assets.defs.mixture import mixture_specs_from_env

    (tmp_path / "data/mixtures").mkdir(parents=True)
    (tmp_path / "data/mixtures/blend.toml").write_text('name = "blend"\n')
    (tmp_path / ".dagster_home/demo").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / ".dagster_home/demo")
    monkeypatch.setenv("SHARD_PROJECT_ROOT", str(tmp_path))
    monkeypatch.setenv("SHARD_MIXTURE_SPECS", "data/mixtures")
    assert list(mixture_specs_from_env().files()) == ["blend"]
