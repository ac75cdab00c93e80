"""`shard-assets mix`: publish one mixture spec by running the code location's own `mixture_job` for it, a named
Dagster run like any the UI launches, then summarise what was published and which audits passed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from shard_loader.builder_api import MixtureFile

from .defs.mixture import MixtureSpecsResource, mixture_key, publish_report
from .lib.errors import PublishError, RunFailed
from .lib.mixture.publish import PublishReport, live_mixture_url, read_mixture
from .execution.local import failure_message, run_job


@dataclass(frozen=True)
class MixResult:
    url: str  # the live mixture's URL (replaced only when every audit passed)
    report: PublishReport  # the version written and every audit's outcome, as the run reported them
    mixture: MixtureFile  # the version as written in the store
    run_id: str
    seconds: float


def publish_mixture_spec(instance: dg.DagsterInstance, spec: Path, resources: dict[str, Any]) -> MixResult:
    """Run mixture_job for `spec`'s asset (`mixture/<its stem>`, defined from its folder) and read back the version it
    wrote. A run that fails before publishing is a RunFailed naming the cause; failed audits are in the result."""
    from .definitions import build_definitions

    started = time.perf_counter()
    spec, key = spec.resolve(), mixture_key(spec.stem)
    defs = build_definitions({**resources, "mixtures": MixtureSpecsResource(folder=str(spec.parent))})
    result = run_job(defs, "mixture_job", instance, assets=(key.to_user_string(),), failed_ok=True)
    materialized = result.asset_materializations_for_node(key.to_python_identifier())
    if not materialized:
        raise RunFailed(
            f"mixture_job [{key.to_user_string()}] failed (run {result.run_id}): "
            f"{failure_message(result) or 'see the run in the Dagster UI'}"
        )
    report, store = publish_report(materialized[0].metadata), resources["store"].store()
    mixture = read_mixture(store, report.key)
    url = live_mixture_url(store, mixture.name)
    return MixResult(url, report, mixture, result.run_id, time.perf_counter() - started)


def refusal(result: MixResult) -> PublishError:
    """One line: which audits failed and why, and that the live mixture was left as it was."""
    failed = [a for a in result.report.audits if not a.passed]
    reasons = "; ".join(f"{a.name}: {'; '.join(a.problems[:3]) or a.summary}" for a in failed)
    return PublishError(
        f"mixture {result.mixture.version} failed its audits ({reasons}); {result.report.key} written, {result.url} "
        "unchanged"
    )
