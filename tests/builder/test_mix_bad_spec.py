"""`shard-assets mix` run as a user runs it on specs a hostile or careless file gives (issue 34, case 8): weights
whose sum overflows and a component `manifest` naming a file that is no manifest are one line naming the spec file
and the field, exit 2, and no run or mixture is written."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.support.mixtures import dagster_home, shard_assets
from tests.support.synthetic import random_docs, write_dataset


@pytest.fixture
def root(tmp_path):
    for i, name in enumerate(("a", "b")):
        write_dataset(tmp_path / "store" / name, {"train": [random_docs(np.random.default_rng(i), 20, mean_len=50)]})
    (tmp_path / "mixtures").mkdir()
    (tmp_path / "notes.txt").write_text("not a manifest\n")
    return tmp_path


def _mix(root, components: str):
    spec = root / "mixtures" / "blend.toml"
    spec.write_text('name = "blend"\ntokens_per_epoch = 1000\n' + components)
    return spec, shard_assets(
        ["mix", "--spec", str(spec), "--store", str(root / "store")], cwd=root, home=dagster_home(root)
    )


@pytest.mark.parametrize(
    "components, field",
    [
        (
            '[[components]]\nmanifest = "../store/a"\nname = "x"\nweight = 1e308\n'
            '[[components]]\nmanifest = "../store/b"\nname = "y"\nweight = 1e308\n',
            r"components\[1\]\.weight: the weights sum past the largest float",
        ),
        (
            '[[components]]\nmanifest = "../store/a/manifest.json"\nweight = 1\n'
            '[[components]]\nmanifest = "../notes.txt"\nweight = 1\n',
            r"components\[1\]\.manifest: .*notes\.txt is a file, not a manifest",
        ),
        (
            '[[components]]\nmanifest = "../store/a/manifests/v1.json/extra"\nweight = 1\n',
            r"components\[0\]\.manifest: .*v1\.json is a file, not a dataset folder",
        ),
    ],
    ids=["weights-overflow", "manifest-is-a-text-file", "file-as-a-folder"],
)
def test_a_bad_component_is_one_line_naming_the_spec_and_field(root, components, field):
    spec, done = _mix(root, components)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {spec}: "), done.stderr
    assert re.search(field, lines[0]), lines[0]
    assert "Traceback" not in done.stderr and not (root / "store/mixtures").exists()


def test_a_refused_spec_run_in_dagster_shows_the_reason_on_each_check(root):
    """Issue 47, item 8: materialised from the UI (not through `shard-assets mix`, which refuses it first), a refused
    spec showed its five checks failed with no reason."""
    import dagster as dg

    from shard_assets.defs.mixture import MixtureSpecsResource, mixture_definitions, mixture_key
    from shard_assets.defs.resources import StoreResource
    from shard_assets.lib.mixture.audits import AUDITS

    (root / "mixtures" / "blend.toml").write_text(
        'name = "blend"\ntokens_per_epoch = 1000\n[[components]]\nmanifest = "../notes.txt"\nweight = 1\n'
    )
    specs = MixtureSpecsResource(folder=str(root / "mixtures"))
    result = dg.materialize(
        mixture_definitions(specs).assets,
        selection=[mixture_key("blend")],
        resources={"mixtures": specs, "store": StoreResource(root=str(root / "store"))},
        raise_on_error=False,
    )
    assert not result.success
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert sorted(checks) == sorted(AUDITS) and not any(e.passed for e in checks.values())
    assert all("components[0].manifest" in e.description and "notes.txt" in e.description for e in checks.values())
    assert not (root / "store/mixtures").exists()
