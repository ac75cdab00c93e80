"""The code version recorded in manifests: the package version plus the git commit when known."""

from __future__ import annotations

import functools
import os
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


@functools.cache
def code_version() -> str:
    """`SHARD_CODE_VERSION` if set (container images), else `<package version>+g<commit>` from git."""
    if env := os.environ.get("SHARD_CODE_VERSION"):
        return env
    try:
        pkg = version("shard-datasets")
    except PackageNotFoundError:
        pkg = "0+unknown"
    try:
        git = ["git", "rev-parse", "--short=12", "HEAD"]
        done = subprocess.run(git, cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5)
        commit = done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"{pkg}+g{commit}" if commit else pkg
