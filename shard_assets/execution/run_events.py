"""What a finished run's events say, wherever it ran (in this process or on a cluster): the innermost error of
its first failed step, else why the run itself failed (a lost worker, a refused launch)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import dagster as dg

from .dagster_private import PARENT_RUN_ID_TAG

if TYPE_CHECKING:
    from dagster_shared.error import SerializableErrorInfo


def failure_message(events: Iterable[dg.DagsterEvent]) -> str:
    """`Class: message` of the first step failure's innermost error (Dagster wraps the asset's own exception);
    without one, of the last engine error (a launch the run launcher refused), else the run failure's message;
    "" when the events hold none of these."""
    events = list(events)
    step_errors = (e.step_failure_data.error for e in events if e.is_step_failure)
    if step_error := next((error for error in step_errors if error is not None), None):
        message = _innermost(step_error)
        if message.startswith("DagsterAssetCheckFailedError"):
            message += "; the version was written but not made live: manifest.json is unchanged"
        return message
    engine_errors = (e.engine_event_data.error for e in reversed(events) if e.is_engine_event)
    if engine_error := next((error for error in engine_errors if error), None):
        return _innermost(engine_error)
    run_failure = next((e for e in events if e.is_run_failure), None)
    return " ".join((run_failure.message or "").split()) if run_failure else ""


def _innermost(error: SerializableErrorInfo) -> str:
    while error.cause is not None:
        error = error.cause
    message = " ".join(error.message.split())
    message = message.split(f"{error.cls_name}: ", 1)[-1]  # Dagster prefixes the class's dotted path
    return f"{error.cls_name}: {message}"


def check_results(instance: dg.DagsterInstance, run_id: str) -> dict[str, bool]:
    """{check name: passed} of the asset checks a run evaluated, from the instance (wherever the run executed), with
    those of the attempts it retried: a retry re-executes from the failed step, so a check that passed before it
    is recorded only in the earlier attempt. A later attempt's result wins."""
    attempts: list[str] = []
    run = instance.get_run_by_id(run_id)
    while run is not None:
        attempts.insert(0, run.run_id)
        parent = run.tags.get(PARENT_RUN_ID_TAG)
        run = instance.get_run_by_id(parent) if parent else None
    results: dict[str, bool] = {}
    for attempt in attempts:
        records = instance.get_records_for_run(attempt, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records
        events = [r.event_log_entry.dagster_event for r in records]
        results |= {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed for e in events if e}
    return results
