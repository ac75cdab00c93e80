"""The local Dagster instance: DAGSTER_HOME=.dagster_home, configured by the repository's dagster.yaml."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

STATE_DIR = ".dagster_home"


def prepare_home(project_dir: str | Path = ".") -> Path:
    """Create DAGSTER_HOME (default `<project>/.dagster_home`; a relative one is taken in the project) with a link to
    `<project>/dagster.yaml`, and point DAGSTER_HOME at it as an absolute path."""
    project = Path(project_dir).resolve()
    home = project / Path(os.environ.get("DAGSTER_HOME") or STATE_DIR)
    home.mkdir(exist_ok=True)
    config = home / "dagster.yaml"
    if (project / "dagster.yaml").is_file() and not config.exists():
        config.symlink_to(project / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def local_instance(project_dir: str | Path = ".") -> dg.DagsterInstance:
    """The instance under DAGSTER_HOME if set (a relative one taken in the project), else the project's
    `.dagster_home`."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        prepare_home(project_dir)
    elif not os.path.isabs(home):
        os.environ["DAGSTER_HOME"] = str(Path(project_dir).resolve() / home)
    return dg.DagsterInstance.get()
