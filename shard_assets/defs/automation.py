"""When assets rebuild by themselves, as named conditions the UI shows by label: downstream of the
tokenizer after any upstream update or a change of their own code version; the tokenizer once its raw
inputs exist, and again when its own code changes. Each also catches up once when automation is turned on."""

import dagster as dg

AC = dg.AutomationCondition

# Dagster counts an update only after a condition's first evaluation, so work done while the automation
# sensor was off (a new file the discovery sensor tokenized first, a manual run) would never flow downstream.
# From that first evaluation until the asset is next requested or updated, an asset whose inputs are all in
# and idle (and not merely vacuously: some input exists) is built once: splits and the manifest re-derive their
# version (the same one when nothing changed: publishing is idempotent), and missing tokenized partitions or a
# missing tokenizer are built.
TURNED_ON = AC.initial_evaluation().since(AC.newly_requested() | AC.newly_updated()).with_label("automation_turned_on")
INPUTS_READY = (
    AC.any_deps_match(~AC.missing()) & ~AC.any_deps_missing() & ~AC.any_deps_in_progress() & ~AC.in_progress()
)
CATCH_UP = (TURNED_ON & INPUTS_READY).with_label("catch_up_when_turned_on")
CATCH_UP_MISSING = (AC.missing() & TURNED_ON & INPUTS_READY).with_label("catch_up_missing_when_turned_on")

# Tokenized partitions: only the missing ones catch up (rebuilding every present partition would re-tokenize all).
RETOKENIZE = (AC.eager() | CATCH_UP_MISSING | AC.code_version_changed()).with_label(
    "rebuild_on_upstream_or_code_change"
)
REBUILD = (AC.eager() | CATCH_UP | AC.code_version_changed()).with_label("rebuild_on_upstream_or_code_change")

# Trained once every registered raw partition is in (not on each new raw file: that would re-tokenize
# everything); a new tokenizer otherwise comes from the schedule or a manual run.
FIRST_TOKENIZER = (
    (
        (AC.missing() & AC.any_deps_updated()).since_last_handled()
        & ~AC.any_deps_missing()
        & ~AC.any_deps_in_progress()
        & ~AC.in_progress()
    )
    | CATCH_UP_MISSING
    | AC.code_version_changed()
).with_label("once_raw_documents_exist")

# The manifest follows splits only: a new tokenizer must not publish before splits exist for it.
PUBLISH = (AC.eager().ignore(dg.AssetSelection.assets("tokenizer")) | CATCH_UP | AC.code_version_changed()).with_label(
    "publish_after_splits"
)
