"""Retention as a Dagster job and a weekly schedule (off by default): the same collection as `shard-assets gc`."""

import dagster as dg

from ..lib.retention import Policy, collect, parse_duration, plan_collection
from .resources import StoreResource


class RetentionConfig(dg.Config):
    keep: int = 3
    max_age: str = "30d"
    grace: str = "7d"
    dry_run: bool = True


@dg.op(
    description="Delete files no kept manifest version (newest `keep`, younger than `max_age`, superseded within "
    "`grace`) needs."
)
def collect_garbage(context: dg.OpExecutionContext, config: RetentionConfig, store: StoreResource) -> None:
    objects = store.store()
    policy = Policy(
        keep=config.keep,
        max_age_s=parse_duration(config.max_age, "max_age"),
        grace_s=parse_duration(config.grace, "grace"),
    )
    plan = plan_collection(objects, policy)
    freed = plan.bytes_freed if config.dry_run else collect(objects, plan)
    context.log.info(
        f"{'dry run: would free' if config.dry_run else 'freed'} {freed:,} bytes in {len(plan.deletions)} files; "
        f"kept {len(plan.kept_versions)} versions ({len({h.version for h in plan.held})} for readers: "
        f"{', '.join(sorted({f'{h.version} ({h.note})' for h in plan.held})) or 'none'}), dropped "
        f"{len(plan.dropped_versions)}; "
        f"abandoned tokenizers: {', '.join(plan.abandoned_tokenizers) or 'none'}"
    )


@dg.job(description="Retention: delete what no kept version needs (dry run unless configured otherwise).")
def gc_job() -> None:
    collect_garbage()


gc_schedule = dg.ScheduleDefinition(
    name="gc_schedule",
    job=gc_job,
    cron_schedule="0 4 * * 6",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    run_config={"ops": {"collect_garbage": {"config": {"dry_run": False}}}},
    description="Saturdays 04:00 UTC: delete files no kept version needs (keep 3, max age 30d, grace 7d).",
)
