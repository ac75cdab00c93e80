"""The CI gate (tests/support/ci_gate.py) run on a small suite by pytest itself: skipped slow tests fail a CI run."""

import pytest

pytest_plugins = ["pytester"]

SUITE = """
import pytest

@pytest.mark.system
def test_needs_a_server():
    pytest.skip("the server is not installed")

def test_fast():
    pass
"""


@pytest.mark.parametrize("ci, outcome", [("true", 1), ("", 0)])
def test_a_skipped_system_test_fails_the_run_only_under_ci(pytester, monkeypatch, ci, outcome):
    monkeypatch.setenv("CI", ci)
    pytester.makepyfile(SUITE)
    pytester.makeini("[pytest]\nmarkers =\n    system: slow\n    integration: slower\n")
    result = pytester.runpytest_subprocess("-p", "tests.support.ci_gate")
    assert result.ret == outcome
    result.assert_outcomes(passed=1, skipped=1)


def test_a_module_skipped_at_collection_fails_a_ci_run(pytester, monkeypatch):
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile('import pytest\npytest.importorskip("no_such_package_here")\n\ndef test_x():\n    pass\n')
    result = pytester.runpytest_subprocess("-p", "tests.support.ci_gate")
    assert result.ret == 1
