"""Common mistakes, run through the real `shard-assets` CLI: each gives one line saying what is wrong, where,
and what to do, and exit status 2, before any expensive work; --debug gives the traceback instead."""

import re
import subprocess
import sys

import pytest
from tests.support.mixtures import shard_assets
from tests.support.patience import HUNG

pytestmark = pytest.mark.integration


def _cli(*args: str, cwd=None, **extra: str) -> subprocess.CompletedProcess:
    return shard_assets(list(args), cwd, cwd or ".", HUNG, {"SHARD_DATASET_SPEC": "", **extra})


def _one_line_error(out: subprocess.CompletedProcess, pattern: str) -> None:
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert re.search(pattern, lines[0]), lines[0]


def _spec(tmp_path, body: str):
    path = tmp_path / "spec.toml"
    path.write_text(f'name = "t"\n{body}\n[[sources]]\nname = "web"\nuri = "{tmp_path}/*.jsonl"\nformat = "jsonl"\n')
    (tmp_path / "a.jsonl").write_text('{"text": "a document long enough to keep around"}\n')
    return path


def test_a_missing_spec_names_the_file_and_the_command_that_writes_the_demo(tmp_path):
    (tmp_path / "workspace.yaml").write_text("")  # the project folder: the demo hint is offered only there
    _one_line_error(
        _cli("plan", cwd=tmp_path), r"data/demo/demo.toml: dataset spec file not found; run `shard-assets demo`"
    )
    _one_line_error(
        _cli("build", "--spec", str(tmp_path / "nope.toml"), cwd=tmp_path), r"nope.toml: dataset spec file not found"
    )


def test_the_demo_spec_given_from_another_folder_names_that_folder_and_offers_no_demo_there(tmp_path):
    """Issue 47, item 9: `--spec data/demo/demo.toml` from a folder that is not the project's answered `run
    'shard-assets demo' to write the demo spec there`."""
    out = _cli("build", "--spec", "data/demo/demo.toml", cwd=tmp_path)
    _one_line_error(out, rf"data/demo/demo.toml: dataset spec file not found, and {tmp_path} is not the project folder")
    assert "shard-assets demo" not in out.stderr


@pytest.mark.parametrize(
    "body, pattern",
    [
        ("max_docs = 3", r"unknown field 'max_docs'"),
        ("[tokenizer]\nvocab_size = -5", r"\[tokenizer\].vocab_size: must be between 257"),
        ("val_fraction = 1.5", r"val_fraction must be in \[0, 1\)"),
        (
            '[tokenizer]\nkind = "pretrained"\nname = "gpt-2-typo"',
            r"tokenizer 'gpt-2-typo' is not in the local Hugging Face cache and HF_HUB_OFFLINE is set",
        ),
    ],
)
def test_bad_specs_fail_plan_in_one_line(tmp_path, body, pattern):
    _one_line_error(_cli("plan", "--spec", str(_spec(tmp_path, body)), cwd=tmp_path), pattern)


def test_bad_arguments_are_refused_before_any_work(tmp_path):
    out = _cli("build", "--spec", str(_spec(tmp_path, "")), "--seq-len", "-1", cwd=tmp_path)
    assert out.returncode == 2 and "argument --seq-len: must be at least 1, got -1" in out.stderr
    assert not (tmp_path / "data").exists()
    _one_line_error(
        _cli("gc", "--store", str(tmp_path / "store"), "--max-age", "lots", cwd=tmp_path),
        r"--max-age: 'lots' is not a duration; write e.g. 30d",
    )


def test_a_typo_in_dataset_store_is_refused_naming_the_variable_and_the_allowed_values(tmp_path):
    for command in ("build", "discover", "gc"):
        out = _cli(command, "--spec", str(_spec(tmp_path, "")), cwd=tmp_path, DATASET_STORE="r3")
        _one_line_error(
            out, r"^error: DATASET_STORE='r3' is not one of local, s3, r2; unset it for the local folder data/store$"
        )
    out = _cli("dev", cwd=tmp_path, DATASET_STORE="r3")  # refused before Dagster starts, not at every run and tick
    _one_line_error(out, r"DATASET_STORE='r3' is not one of local, s3, r2")
    assert not (tmp_path / "data").exists() and not (tmp_path / ".dagster_home").exists()


def test_debug_prints_the_traceback(tmp_path):
    out = _cli("--debug", "plan", "--spec", str(tmp_path / "nope.toml"), cwd=tmp_path)
    assert out.returncode != 0 and "Traceback (most recent call last)" in out.stderr and "SpecError" in out.stderr


def test_the_loader_cli_says_when_the_dataset_folder_does_not_exist(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "shard_loader.cli", "verify", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        timeout=HUNG,
    )
    _one_line_error(out, r"nowhere: the folder does not exist, so it holds no dataset; check the path")
