"""sha256 and size checks of files against the manifest's promises."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import IntegrityError
from ..format import FileRef


def sha256_file(path: str | Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def verify_file(path: str | Path, ref: FileRef) -> None:
    """Raise IntegrityError naming the key unless the file has the manifest's size and sha256."""
    size = Path(path).stat().st_size
    if size != ref.size:
        raise IntegrityError(f"{ref.key}: size is {size} bytes, manifest says {ref.size} ({path})")
    digest = sha256_file(path)
    if digest != ref.sha256:
        raise IntegrityError(f"{ref.key}: sha256 is {digest}, manifest says {ref.sha256} ({path})")
