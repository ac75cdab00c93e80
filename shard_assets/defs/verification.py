"""Full verification as a Dagster job: every byte of the live version checked against the manifest."""

import dagster as dg

from ..lib.errors import PublishError
from ..lib.verification import verify_live_version
from .resources import StoreResource


@dg.op(description="Read every file of the live manifest and check its size and sha256; fail naming each mismatch.")
def verify_live(context: dg.OpExecutionContext, store: StoreResource) -> None:
    result = verify_live_version(store.store())
    context.log.info(
        f"{result.version}: {result.files} files, {result.bytes:,} bytes read, {len(result.problems)} problems"
    )
    if result.problems:
        raise PublishError(
            f"{result.version}: {len(result.problems)} files differ from the manifest: {'; '.join(result.problems[:5])}"
        )


@dg.job(
    description="Full verification of the live version (reads every byte; the publish audits read only records and a "
    "sample)."
)
def verify_job() -> None:
    verify_live()
