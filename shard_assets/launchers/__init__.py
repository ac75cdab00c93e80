"""Run launchers the Dagster instance loads from its dagster.yaml
(`run_launcher: module: shard_assets.launchers.slurm`):
how a run leaves the machine that queued it. Glue only: Slurm (or Kubernetes, ECS) is the engine. They never
import the code location (`shard_assets.defs`, `definitions`) or the `shard-assets` command."""
