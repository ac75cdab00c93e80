"""A fresh clone of this checkout, as `git clone` gives it (tracked files and new ones not ignored), sharing the
checkout's .venv, for the tests that follow the README from scratch."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = (  # a developer's own settings, which a new user does not have
    "DAGSTER_HOME",
    "SHARD_DATASET_SPEC",
    "SHARD_PROJECT_ROOT",
    "SHARD_MIXTURE_SPECS",
    "DATASET_STORE",
    "DATASET_STORE_ROOT",
    "SHARD_PARTITION_BYTES",
)


def fresh_clone(dest: Path) -> Path:
    """Copy the files a clone would hold into `dest` and link this checkout's .venv there."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, files.decode().split("\0")):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    return dest


def new_user_env() -> dict[str, str]:
    """This environment without the project's settings, offline, with `scripts/demo`'s setup skipped (the .venv is
    shared)."""
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    return env | {"SHARD_SKIP_SETUP": "1", "HF_HUB_OFFLINE": "1"}
