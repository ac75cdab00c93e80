"""A pytest plugin: under CI (`CI` set) a skipped integration or system test, or a test module skipped whole at
collection (a missing tool or package), fails the run: a missing install must not pass as green."""

import os

import pytest

_skipped: list[str] = []


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and {"integration", "system"} & set(report.keywords):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI") and _skipped and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        named = ", ".join(_skipped[:3]) + (f" and {len(_skipped) - 3} more" if len(_skipped) > 3 else "")
        print(f"\nCI: {len(_skipped)} integration/system tests skipped ({named}): failing the run")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
