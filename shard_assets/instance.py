"""The local Dagster instance: one home per dataset, `.dagster_home/<dataset>` in the project (a home's raw_files
partitions are one dataset's), configured by the project's dagster.yaml; DAGSTER_HOME, where set, overrides it."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .lib.settings import project_root

if TYPE_CHECKING:
    import dagster as dg

STATE_DIR = ".dagster_home"
NO_TELEMETRY = "telemetry:\n  enabled: false\n"  # a home outside a project: no banner printed into every build
DATABASE_RETRIES = ("Retrying failed database connection", "Retrying failed database creation")


def _quiet_database_retries(record: logging.LogRecord) -> bool:
    """dagster-postgres warns on the root logger at each quick reconnect (the build says one line per outage instead)
    and when another process creates a fresh database's tables at the same moment (nothing to act on)."""
    return not str(record.msg).startswith(DATABASE_RETRIES)


def home_for(dataset: str, project_dir: str | Path | None = None) -> Path:
    """DAGSTER_HOME if set (a relative one taken in the project), else `<project>/.dagster_home/<dataset>`."""
    project = Path(project_dir).resolve() if project_dir else project_root()
    return project / (os.environ.get("DAGSTER_HOME") or Path(STATE_DIR, dataset))


def prepare_home(dataset: str, project_dir: str | Path | None = None) -> Path:
    """Create the dataset's home (parents too) with a link to the project's dagster.yaml (outside a project, a
    config that turns telemetry off), and point DAGSTER_HOME at it as an absolute path."""
    project = Path(project_dir).resolve() if project_dir else project_root()
    home = home_for(dataset, project)
    home.mkdir(parents=True, exist_ok=True)
    config, source = home / "dagster.yaml", project / "dagster.yaml"
    if not config.exists() and not config.is_symlink():
        if source.is_file():
            config.symlink_to(source)
        else:
            config.write_text(NO_TELEMETRY)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def local_instance(dataset: str, project_dir: str | Path | None = None) -> dg.DagsterInstance:
    """The instance in the dataset's home (see `home_for`), created if missing."""
    import dagster as dg

    prepare_home(dataset, project_dir)
    logging.getLogger().addFilter(_quiet_database_retries)  # for the process: a build's output is its own lines
    return dg.DagsterInstance.get()
