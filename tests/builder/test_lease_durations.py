"""Durations are bounded where they are accepted (#34 case 1): `shard-loader pin URL --for 1000000000000d` is refused
in one line before any pin is written, and a lease or pin in the store whose `seconds` is 1e300, Infinity or NaN
makes neither `shard-assets gc` nor its dry run raise: gc names the bad key and collects everything else."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from shard_loader.errors import ManifestError
from shard_loader.format.leases import Lease, lease_key
from tests.support.patience import HUNG
from tests.support.synthetic import random_docs, write_dataset

pytestmark = pytest.mark.integration


def _cli(module: str, *args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DAGSTER_HOME": str(cwd), "SHARD_DATASET_SPEC": ""}
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=HUNG
    )


def _two_versions(root) -> tuple[str, str]:
    """v1 (superseded, its files its own) and v2 (live) in one store."""
    rng = np.random.default_rng(3)
    v1 = write_dataset(root, {"train": [random_docs(rng, 5)]}, version="v1-0123456789abcdef", tag="one").version
    v2 = write_dataset(root, {"train": [random_docs(rng, 5)]}, version="v2-0123456789abcdef", tag="two").version
    return v1, v2


@pytest.mark.parametrize("text", ["1000000000000d", "1e400s", "infd", "nan"])
def test_pin_for_an_unbounded_duration_is_refused_in_one_line_before_anything_is_written(tmp_path, text):
    _two_versions(tmp_path / "store")
    out = _cli("shard_loader.cli", "pin", str(tmp_path / "store"), "--for", text, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"error: --for: {text!r} ") and "36500d" in line, line
    assert not (tmp_path / "store" / "readers").exists()  # no pin written


@pytest.mark.parametrize("seconds", ["1e300", "Infinity", "NaN", "-Infinity"])
def test_gc_names_a_lease_of_unbounded_seconds_and_collects_everything_else(tmp_path, seconds):
    store = tmp_path / "store"
    v1, _ = _two_versions(store)
    bad = lease_key(v1, "pin-forged")
    (store / bad).parent.mkdir(parents=True)
    (store / bad).write_text(
        f'{{"format": "shard-reader-lease", "version": "{v1}", "holder": "pin-forged", "kind": "pin", '
        f'"seconds": {seconds}, "note": "forged"}}\n'
    )
    lapsed = Lease(v1, "pin-lapsed", "pin", 0.0, "lapsed")
    (store / lease_key(v1, "pin-lapsed")).write_bytes(lapsed.to_bytes())
    args = ("gc", "--store", str(store), "--keep", "1", "--max-age", "0s", "--grace", "0s")
    for extra in ((), ("--delete",)):
        out = _cli("shard_assets.cli", *args, *extra, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert "Traceback" not in out.stderr and "OverflowError" not in out.stderr
        said = out.stdout + out.stderr
        assert bad in said and "seconds" in said, said
        assert f"versions dropped  1: {v1}" in out.stdout, out.stdout
    assert not (store / "manifests" / f"{v1}.json").exists()  # collected: the bad record held nothing
    assert not (store / lease_key(v1, "pin-lapsed")).exists()  # the lapsed pin too
    assert not list((store / "tokenized" / "one").rglob("*.npy"))
    assert (store / bad).exists()  # left for its owner to see, named in every run


@pytest.mark.parametrize("seconds", [1e300, float("inf"), float("nan"), -1.0])
def test_a_lease_record_outside_the_bound_is_refused_naming_its_key(seconds):
    key = lease_key("v1-0123456789abcdef", "pin-x")
    raw = json.dumps(
        {"format": "shard-reader-lease", "version": "v1-0123456789abcdef", "holder": "pin-x", "kind": "pin"}
        | {"seconds": seconds}
    ).encode()
    with pytest.raises(ManifestError, match=rf"^{key}: .*seconds"):
        Lease.parse(raw, key)


@pytest.mark.parametrize("text", ["1e400GB", "infTB", "nanMB"])
def test_a_size_past_any_number_is_refused_naming_the_argument(text):
    from shard_loader.arguments import ArgumentError, size_in_bytes

    with pytest.raises(ArgumentError, match=rf"^disk_budget must be a byte count or a size such as '200GB'.*{text!r}"):
        size_in_bytes("disk_budget", text)


def _hidden(store, v1):  # a holder named with `..`: its key's last part starts with a dot
    path = store / "readers" / v1 / "...json"
    path.write_bytes(Lease(v1, "pin-a", "pin", 3600.0, "dots").to_bytes())
    return path


def _link(store, v1):
    (store / "elsewhere.json").write_bytes(Lease(v1, "pin-b", "pin", 3600.0, "link").to_bytes())
    path = store / "readers" / v1 / "pin-b.json"
    path.symlink_to(store / "elsewhere.json")
    return path


def _folder(store, v1):
    path = store / "readers" / v1 / "pin-c.json"
    path.mkdir()
    return path


@pytest.mark.parametrize("make", [_hidden, _link, _folder], ids=["holder-with-dots", "symlink", "directory"])
def test_gc_names_a_lease_it_cannot_read_however_it_is_malformed(tmp_path, make):
    """Issue 47, item 6: these three were skipped by the store's listing, so gc ignored them without a word."""
    store = tmp_path / "store"
    v1, _ = _two_versions(store)
    (store / "readers" / v1).mkdir(parents=True)
    path = make(store, v1)
    out = _cli(
        "shard_assets.cli", "gc", "--store", str(store), "--keep", "1", "--max-age", "0s", "--grace", "0s", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    key = path.relative_to(store).as_posix()
    assert f"{key}: " in out.stdout + out.stderr and "holds nothing" in out.stdout + out.stderr, out.stderr
    assert f"versions dropped  1: {v1}" in out.stdout and os.path.lexists(path)
