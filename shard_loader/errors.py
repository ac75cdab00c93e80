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


class CredentialsError(StoreError):
    """An S3/R2 store was opened without keys: the message names the variables or options to set."""


class RangeNotSupportedError(StoreError):
    """The server answered a ranged GET with the whole file (status 200): it ignores Range."""


class DeadlineError(StoreError):
    """A file did not arrive within its deadline (a stalled or trickling server); not retried."""


class UnsafeFileError(StoreError):
    """A key names a symlink, FIFO, device or a path outside the dataset root; refused, never opened."""


class TooLargeError(StoreError):
    """An object is larger than the cap for its kind (a manifest, a file beyond free disk); refused before allocation."""


class MissingExtraError(ShardLoaderError, ModuleNotFoundError):
    """An optional dependency is not installed: the one-line message names the extra that installs it."""

    def __init__(self, module: str, extra: str, needed_by: str) -> None:
        super().__init__(f"{needed_by} needs {module}, which is not installed: pip install 'shard-loader[{extra}]'", name=module)
