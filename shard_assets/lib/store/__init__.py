"""The object store every asset reads and writes: a local folder by default, or an S3/R2 bucket."""

from .base import ObjectStore, ObjectStoreError
from .local import LocalFolderStore

__all__ = ["LocalFolderStore", "ObjectStore", "ObjectStoreError"]
