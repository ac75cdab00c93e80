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


class NotFoundError(StoreError):
    """No object at the key (404, NoSuchKey, no such file): missing, not unreadable; never retried."""


class SettingsError(StoreError):
    """A store setting from the environment or the arguments (an endpoint, an account id) is missing or malformed;
    the message names the variable and the values it allows."""


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
    """An object is larger than the cap for its kind (a manifest, a file beyond free disk); refused before
    allocation."""


class MissingFileError(ShardLoaderError):
    """A file the manifest names is not where it must be: never copied, or deleted under a running reader."""


class CacheFileError(ShardLoaderError):
    """A file or folder in the cache directory cannot be used (permissions, a read-only file system); the message names
    it."""


class UnsafeCacheFileError(CacheFileError):
    """A symlink, directory, FIFO or device in the cache directory where the cache keeps a regular file (or a folder)
    of its own: something the cache did not make. Refused, never followed."""


class MissingExtraError(ShardLoaderError, ModuleNotFoundError):
    """An optional dependency is not installed: the one-line message names the extra that installs it."""

    def __init__(self, module: str, extra: str, needed_by: str) -> None:
        super().__init__(
            f"{needed_by} needs {module}, which is not installed: pip install 'shard-loader[{extra}]'", name=module
        )
