"""Exception types of the builder, under one root; each message names the file, key or field at fault
and what to do. Every CLI prints them as one line (`error: ...`) and exits 2."""


class BuildError(Exception):
    """Base class for errors the builder raises on purpose."""


class SpecError(BuildError, ValueError):
    """The dataset specification is invalid."""


class SourceError(BuildError):
    """A source file cannot be read as configured: missing column, bad encoding, truncated, empty."""


class TokenizerError(BuildError):
    """The tokenizer cannot be loaded or trained as configured."""


class RecordError(BuildError):
    """A record the builder keeps in the store is missing or malformed."""


class RecordMissingError(RecordError):
    """A record the builder needs is not in the store: its asset has not been materialised there."""


class PublishError(BuildError):
    """A manifest cannot be published: a referenced file is missing, differs from its record, or a check failed."""


class MixtureError(BuildError):
    """A mixture cannot be resolved: a component manifest unreadable or not a dataset, names alike, an empty split."""


class ObjectStoreError(BuildError):
    """A store read or write failed after its retries: a refused request, an unreachable bucket, a missing key
    (ObjectMissingError). The store's own error (a shard_loader StoreError) is kept as the cause."""


class ObjectMissingError(ObjectStoreError):
    """No object at the key: missing, as opposed to present but unreadable."""


class ConditionalWriteError(ObjectStoreError):
    """The server cannot honour a conditional put (If-None-Match): it ignores the header or refuses it (501, 400),
    so write-once versions cannot be promised there; the build is refused before it writes anything."""


class RunFailed(BuildError):
    """A Dagster run of the build failed; the message names the job, partition and the innermost error."""


class SettingsError(BuildError, ValueError):
    """An environment variable or command-line setting is invalid; the message names it and the allowed values."""


class PrefixOwnedError(BuildError):
    """The store root holds another dataset (state/dataset.json): one prefix holds one dataset."""


class StateMismatchError(BuildError):
    """A record read from the store disagrees with what it claims to describe (a tokenizer record with its
    tokenizer file, a partition's records with its registration or its source): forged, or from another build."""


class DedupError(BuildError):
    """The dedup index cannot be updated or read: its lock is held too long, or a record disagrees with the data."""
