"""gc and mixtures (issue 34, case 2), with the CLI as a user runs it: a published mixture pins the component versions
it reads, in each component's store, so a routine `shard-assets gc` of a component keeps the pinned version (its dry
run names the mixture) and the mixture still reads; re-mixed onto the component's new version, the pin moves and the
old version becomes collectable."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.support.mixtures import dagster_home, shard_assets
from tests.support.synthetic import random_docs, write_dataset

GC = ["gc", "--keep", "1", "--max-age", "0s", "--grace", "0s"]


def _docs(seed: int) -> list:
    return [random_docs(np.random.default_rng(seed), 30, vocab_size=300, mean_len=40)]


@pytest.fixture
def root(tmp_path):
    write_dataset(tmp_path / "store/web", {"train": _docs(0)}, vocab_size=300, version="web-v1", tag="t1")
    write_dataset(tmp_path / "store/code", {"train": _docs(1)}, vocab_size=300, version="code-v1", name="code")
    (tmp_path / "mixtures").mkdir()
    (tmp_path / "mixtures/blend.toml").write_text(
        'name = "blend"\ntokens_per_epoch = 2000\n'
        '[[components]]\nmanifest = "../store/web"\nweight = 0.5\n'
        '[[components]]\nmanifest = "../store/code"\nweight = 0.5\n'
    )
    return tmp_path


def _run(root, *args: str):
    done = shard_assets(list(args), cwd=root, home=dagster_home(root))
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _mix(root) -> str:
    _run(root, "mix", "--spec", str(root / "mixtures/blend.toml"), "--store", str(root / "store"))
    return json.loads((root / "store/mixtures/blend.json").read_text())["mixture"]["version"]


def _read(root) -> int:
    """Tokens of the mixture's first batches, read by the loader from the live mixture file (in a process of its own,
    so its reader leases end with it)."""
    done = subprocess.run(
        [sys.executable, "-c", READ, str(root / "store/mixtures/blend.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout)


READ = """
import sys, shard_loader
batches = shard_loader.iter_sequences(sys.argv[1], "train", seq_len=16, batch_size=4)
print(sum(int(next(batches)["input_ids"].size) for _ in range(8)))
"""


def test_gc_keeps_the_component_version_a_live_mixture_pins_until_the_mixture_moves_on(root):
    first = _mix(root)
    write_dataset(root / "store/web", {"train": _docs(2)}, vocab_size=300, version="web-v2", tag="t2")
    web = str(root / "store/web")

    dry = _run(root, *GC, "--store", web)
    assert "versions dropped  0: -" in dry, dry
    assert f"kept for a pin  web-v1  (mixture {first} at {root / 'store/mixtures/blend.json'}" in dry, dry
    _run(root, *GC, "--store", web, "--delete")
    assert (root / "store/web/manifests/web-v1.json").exists()
    assert _read(root) == 8 * 4 * 16  # the mixture still reads its pinned version

    second = _mix(root)  # web's live manifest.json names web-v2 now: the mixture moves, and its pin with it
    assert second != first
    assert not list((root / "store/web/readers").glob("web-v1/mixture-*"))  # the old pin removed
    assert [p.name for p in (root / "store/web/readers/web-v2").iterdir()] == ["mixture-blend.json"]
    dry = _run(root, *GC, "--store", web)
    assert "versions dropped  1: web-v1" in dry and f"kept for a pin  web-v2  (mixture {second}" not in dry, dry
    _run(root, *GC, "--store", web, "--delete")
    assert not (root / "store/web/manifests/web-v1.json").exists()
    assert _read(root) == 8 * 4 * 16


def test_a_copied_stores_own_mixture_moves_the_pins_the_copy_carries(root):
    """Issue 47, item 12: pins were held by the mixture's name and its live file's URL, so a copy of the whole store
    kept the original mixture's pins, which the copy's own mixture (at another URL) never released."""
    import shutil

    _mix(root)
    shutil.copytree(root / "store", root / "copy", symlinks=True)
    write_dataset(root / "copy/web", {"train": _docs(2)}, vocab_size=300, version="web-v2", tag="t2")
    spec = root / "mixtures/copy.toml"
    spec.write_text((root / "mixtures/blend.toml").read_text().replace("../store/", "../copy/"))
    _run(root, "mix", "--spec", str(spec), "--store", str(root / "copy"))  # the copy's mixture moves to web-v2
    assert not list((root / "copy/web/readers").glob("web-v1/mixture-*"))  # the pin the copy carried is released
    assert [p.name for p in (root / "copy/web/readers/web-v2").iterdir()] == ["mixture-blend.json"]
    assert list((root / "store/web/readers").glob("web-v1/mixture-*"))  # the original's own stays with it


def test_a_pin_written_under_the_earlier_holder_name_is_released_when_the_mixture_moves(root):
    """Mixtures published before item 12 of issue 47 pinned a component of their own store under the mixture's name
    and its live URL's hash: moving such a mixture releases that pin too, or gc would keep the version for 10 years."""
    from shard_assets.lib.mixture.pins import pin_holder
    from shard_assets.lib.mixture.publish import live_mixture_url
    from shard_assets.lib.store import LocalFolderStore

    _mix(root)
    pins = root / "store/web/readers/web-v1"
    earlier = pin_holder(live_mixture_url(LocalFolderStore(root / "store"), "blend"), "blend", relative=False)
    (pins / "mixture-blend.json").rename(pins / f"{earlier}.json")  # as the earlier release wrote it
    write_dataset(root / "store/web", {"train": _docs(2)}, vocab_size=300, version="web-v2", tag="t2")
    _mix(root)  # the mixture moves to web-v2
    assert not list(pins.glob("mixture-*"))
