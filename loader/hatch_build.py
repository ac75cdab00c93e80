"""Package the repository's top-level shard_loader/ as this distribution's only package.

Built from the repository (a wheel or an sdist), the package is `../shard_loader`, force-included. Built
from that sdist, it is `./shard_loader`, which hatchling finds by the project's name. An editable install
includes nothing: `dev-mode-dirs` puts the repository root on sys.path, so the working tree is what imports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class PackageFromRepository(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        source = Path(self.root).parent / "shard_loader"
        if version != "editable" and (source / "__init__.py").is_file():
            build_data["force_include"][str(source)] = "shard_loader"
