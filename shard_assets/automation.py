"""When downstream assets rebuild by themselves: after any upstream update (a new tokenizer, a new or
changed raw partition) or a change of their own code version."""

import dagster as dg

REBUILD = dg.AutomationCondition.eager() | dg.AutomationCondition.code_version_changed()
