"""The object store every asset reads and writes: a local folder by default, or an S3/R2 bucket; each is the
loader's store of that kind (shard_loader.storage) extended with writes."""

from ..errors import ConditionalWriteError, ObjectMissingError, ObjectStoreError
from .base import ObjectInfo, ObjectStore
from .local import LocalFolderStore

__all__ = [
    "ConditionalWriteError",
    "LocalFolderStore",
    "ObjectInfo",
    "ObjectMissingError",
    "ObjectStore",
    "ObjectStoreError",
]
