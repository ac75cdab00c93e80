"""Exception types raised by shard_loader; each message names the file, key or field at fault."""


class ShardLoaderError(Exception):
    """Base class for every error shard_loader raises on purpose."""


class ManifestError(ShardLoaderError):
    """The manifest is malformed, of an unknown format version, or names an unsafe key."""


class IntegrityError(ShardLoaderError):
    """A file's size, sha256 or internal structure differs from what the manifest promises."""


class ShardFormatError(IntegrityError):
    """A shard's .npy or .bin content is not a valid token array or offset table."""


class StoreError(ShardLoaderError):
    """A store could not be reached or refused a request after all retries."""


class TransientStoreError(StoreError):
    """A request failed in a way worth retrying: 5xx, throttling, a timeout, a reset, a short read."""


class DiskBudgetError(ShardLoaderError):
    """The cache directory lacks the disk space (or budget) the requested work needs."""
