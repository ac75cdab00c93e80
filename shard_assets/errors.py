"""Exception types of the builder; each message names the file, key or field at fault."""


class BuildError(Exception):
    """Base class for errors the builder raises on purpose."""


class SpecError(BuildError, ValueError):
    """The dataset specification is invalid."""


class SourceError(BuildError):
    """A source file cannot be read as configured: missing column, bad encoding, truncated, empty."""


class TokenizerError(BuildError):
    """The tokenizer cannot be loaded or trained as configured."""


class PublishError(BuildError):
    """A manifest cannot be published: a referenced file is missing or differs from its record."""
