"""The mixtures group in a real browser: two specs published with `shard-assets mix`, one of them refused by a blocking
check, and a third never mixed. Each spec is its own asset (`mixture/<name>`) with its own checks, so the refused spec
shows its failed check, the live one all passed, and the one never mixed no result at all (before, one partitioned
asset's checks showed whichever spec ran last, and a green tick on "0 / 5 Passed" before any mix). Screenshots go to
test-artifacts/ui/.
"""

import os
from pathlib import Path

import pytest

from shard_assets.lib.mixture.audits import AUDITS as MIXTURE_AUDITS
from tests.support.mixtures import blend_spec, build_corpus, dagster_home, live_manifest, mix
from tests.builder.test_ui import ARTIFACTS, CHROMIUM, _screenshot, browser, dev_server  # noqa: F401  (browser: the module's fixture)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(
        CHROMIUM is None, reason="Debian's chromium is not installed (scripts/setup installs it with SETUP_APT=1)"
    ),
]


def test_each_mixture_spec_is_its_own_asset_with_its_own_checks(tmp_path, browser):  # noqa: F811
    root = tmp_path / "root"
    build_corpus(root)
    budget = sum(live_manifest(root / "store" / n)["splits"]["train"]["tokens"] for n in ("web", "code"))
    assert mix(root, blend_spec(budget)).returncode == 0
    odd = blend_spec(budget, weights={"web": 0.5, "other": 0.5}).replace('name = "blend"', 'name = "odd"')
    assert mix(root, odd, name="odd").returncode == 2  # two tokenizers: one_tokenizer fails, blend stays live
    (root / "mixtures" / "later.toml").write_text(blend_spec(budget).replace('name = "blend"', 'name = "later"'))
    env = {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home(root)),
        "SHARD_DATASET_SPEC": str(root / "specs/web.toml"),
        "DATASET_STORE_ROOT": str(root / "store"),
        "SHARD_MIXTURE_SPECS": str(root / "mixtures"),
        "HF_HUB_OFFLINE": "1",
    }
    pages = {}
    with dev_server(ROOT, env, tmp_path / "dev.log") as dagster:
        for name in ("blend", "odd", "later"):
            url = f"{dagster.url}/assets/mixture/{name}?view=checks"
            pages[name] = _screenshot(browser, url, f"mixture-{name}-checks", 'text="one_tokenizer"')
        group_url = f"{dagster.url}/locations/shard_assets/asset-groups/mixtures"
        group = _screenshot(browser, group_url, "mixtures-group", 'text="later"')
    for name, text in pages.items():  # each check listed with its latest status under its name
        assert all(check in text for check in MIXTURE_AUDITS), (name, text)
    audits = len(MIXTURE_AUDITS)
    assert pages["blend"].count("Succeeded") == audits and "Failed" not in pages["blend"], pages["blend"]
    assert pages["odd"].count("Succeeded") == audits - 1 and "Failed" in pages["odd"], pages["odd"]
    assert pages["later"].count("Not Evaluated") == audits and "Succeeded" not in pages["later"], pages["later"]
    assert all(name in group for name in ("blend", "odd", "later")), group
