"""The mixtures group in a real browser: two specs published with `shard-assets mix`, one of them refused by a blocking
check. Each check has a result per spec (its Partitions tab), so the refused spec shows failed and the live one passed;
before, the refusal was the one result of the check, whichever spec it came from. Screenshots go to test-artifacts/ui/.
"""

import os
from pathlib import Path

import pytest

from tests.support.mixtures import blend_spec, build_corpus, dagster_home, live_manifest, mix
from tests.builder.test_ui import ARTIFACTS, CHROMIUM, _screenshot, browser, dev_server  # noqa: F401  (browser: the module's fixture)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(
        CHROMIUM is None, reason="Debian's chromium is not installed (scripts/setup installs it with SETUP_APT=1)"
    ),
]


def test_each_mixture_check_shows_each_spec_s_own_result(tmp_path, browser):  # noqa: F811
    root = tmp_path / "root"
    build_corpus(root)
    budget = sum(live_manifest(root / "store" / n)["splits"]["train"]["tokens"] for n in ("web", "code"))
    assert mix(root, blend_spec(budget)).returncode == 0
    odd = blend_spec(budget, weights={"web": 0.5, "other": 0.5}).replace('name = "blend"', 'name = "odd"')
    assert mix(root, odd, name="odd").returncode == 2  # two tokenizers: one_tokenizer fails, blend stays live
    env = {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home(root)),
        "SHARD_DATASET_SPEC": str(root / "specs/web.toml"),
        "DATASET_STORE_ROOT": str(root / "store"),
        "SHARD_MIXTURE_SPECS": str(root / "mixtures"),
        "HF_HUB_OFFLINE": "1",
    }
    with dev_server(ROOT, env, tmp_path / "dev.log") as dagster:
        _screenshot(browser, f"{dagster.url}/assets/mixture?view=checks", "mixture-checks", 'text="one_tokenizer"')
        browser.get_by_text("one_tokenizer", exact=True).first.click()
        browser.get_by_text("Execution history", exact=True).wait_for()  # the check's own tabs, after the asset's
        browser.get_by_text("Partitions", exact=True).last.click()
        browser.get_by_text("Passed (1)").wait_for()
        text = browser.inner_text("body")
        browser.screenshot(path=str(ARTIFACTS / "mixture-check-partitions.png"), full_page=True)
    assert "Failed (1)" in text and "Passed (1)" in text, text
    assert "blend" in text and "odd" in text
