"""When assets rebuild by themselves, as named conditions the UI shows by label: downstream of the
tokenizer after any upstream update or a change of their own code version; the tokenizer once its raw
inputs exist, and again when its own code changes."""

import dagster as dg

AC = dg.AutomationCondition

REBUILD = (AC.eager() | AC.code_version_changed()).with_label("rebuild_on_upstream_or_code_change")

# Trained once every registered raw partition is in (not on each new raw file: that would re-tokenize
# everything); a new tokenizer otherwise comes from the schedule or a manual run.
FIRST_TOKENIZER = (
    (
        (AC.missing() & AC.any_deps_updated()).since_last_handled()
        & ~AC.any_deps_missing()
        & ~AC.any_deps_in_progress()
        & ~AC.in_progress()
    )
    | AC.code_version_changed()
).with_label("once_raw_documents_exist")

# The manifest follows splits only: a new tokenizer must not publish before splits exist for it.
PUBLISH = (AC.eager().ignore(dg.AssetSelection.assets("tokenizer")) | AC.code_version_changed()).with_label(
    "publish_after_splits"
)
