"""Where a build's runs execute: in this process or a pool of processes (`local.py`), through a cluster instance's
queue followed to the end (`run_queue.py`, with a daemon for the build when none serves it: `build_daemon.py`), and
on Slurm (`slurm.py`, the run launcher an instance loads from dagster.yaml, glue around `sbatch.py`'s commands).
The one room that uses Dagster's private API, all of it named in `dagster_private.py`."""
