"""What a finished run's events say, wherever it ran (in this process or on a cluster): the innermost error of
its first failed step, else why the run itself failed (a lost worker, a refused launch)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import dagster as dg

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
