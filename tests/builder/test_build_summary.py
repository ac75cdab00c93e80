"""The build summary's check count over a retried run (issue 34, case 13): Dagster re-executes a retry from its
failed step, so a check that passed in the failed attempt is recorded only there; the summary counts the checks of
every attempt, a later attempt's result winning. Real runs on an instance, linked as Dagster links a retry."""

from __future__ import annotations

import dagster as dg
from dagster._core.storage.tags import PARENT_RUN_ID_TAG, ROOT_RUN_ID_TAG

from shard_assets.execution.run_events import check_results


@dg.asset(check_specs=[dg.AssetCheckSpec("first_is_sound", asset="first")])
def first() -> dg.MaterializeResult:
    return dg.MaterializeResult(check_results=[dg.AssetCheckResult(passed=True)])


@dg.asset(deps=[first], check_specs=[dg.AssetCheckSpec("second_is_sound", asset="second")])
def second() -> dg.MaterializeResult:
    return dg.MaterializeResult(check_results=[dg.AssetCheckResult(passed=True)])


def test_the_checks_of_a_retried_run_include_those_its_failed_attempt_passed():
    with dg.DagsterInstance.ephemeral() as instance:
        attempt = dg.materialize([first], instance=instance)  # its next step failed: the run failed after this check
        retry = dg.materialize(
            [first, second],
            selection=[second],
            instance=instance,
            tags={PARENT_RUN_ID_TAG: attempt.run_id, ROOT_RUN_ID_TAG: attempt.run_id},
        )  # re-executed from the failed step
        assert check_results(instance, retry.run_id) == {"first_is_sound": True, "second_is_sound": True}
        assert check_results(instance, attempt.run_id) == {"first_is_sound": True}
