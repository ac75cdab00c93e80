"""The blocking audits of a publish (a dataset's manifest, a mixture) as Dagster asset checks: their specs, and each
`Audit` as a check result with a one-line summary and the problems listed."""

from collections.abc import Mapping

import dagster as dg

from ..lib.publish import Audit
from .figures import markdown_list


def audit_check_specs(asset: str | dg.AssetKey, audits: Mapping[str, str]) -> list[dg.AssetCheckSpec]:
    """One blocking check per audit (name: description) of `asset`."""
    return [dg.AssetCheckSpec(name, asset=asset, blocking=True, description=text) for name, text in audits.items()]


def check_summary(a: Audit) -> str:
    """One line a glance can read: what was checked when it passed, what failed (the first problem) when not."""
    if a.passed:
        return a.summary
    more = f" (and {len(a.problems) - 1:,} more)" if len(a.problems) > 1 else ""
    return f"FAILED: {a.problems[0] if a.problems else a.summary}{more}"


def check_result(a: Audit) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=a.name,
        passed=a.passed,
        description=check_summary(a),
        metadata={
            "summary": check_summary(a),
            **({"problems": markdown_list(a.problems, limit=50)} if a.problems else {}),
        },
    )
