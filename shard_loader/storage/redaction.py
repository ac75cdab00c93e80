"""Keep credentials out of every message: known secret values from the environment are masked."""

from __future__ import annotations

import logging
import os

SECRET_VARIABLES = (
    "R2_DATASET_READ_ACCESS_KEY_ID",
    "R2_DATASET_READ_SECRET_ACCESS_KEY",
    "R2_DATASET_WRITE_ACCESS_KEY_ID",
    "R2_DATASET_WRITE_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)


_REGISTERED: set[str] = set()  # secrets given as arguments (store_options), not through the environment


def register_secret(*values: str | None) -> None:
    """Mask these values too from now on: keys passed as arguments are as secret as those in the environment."""
    _REGISTERED.update(v for v in values if v and len(v) >= 4)


def redact(text: str, extra: tuple[str, ...] = ()) -> str:
    """`text` with every secret value (from the environment, registered ones, plus `extra`) replaced by ***."""
    for value in [os.environ.get(v, "") for v in SECRET_VARIABLES] + sorted(_REGISTERED) + list(extra):
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


# botocore logs whole requests at DEBUG, the Authorization header (with the access key id) included.
CLIENT_LOGGERS = (
    "botocore.endpoint",
    "botocore.auth",
    "botocore.hooks",
    "botocore.httpsession",
    "botocore.parsers",
    "urllib3.connectionpool",
    "s3transfer",
)


class RedactingFilter(logging.Filter):
    """Masks secret values in every record that passes through the logger it is attached to."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, ()
        return True


def redact_client_logs() -> None:
    """Attach the redacting filter to the HTTP client loggers (once), whatever level the user enables."""
    for name in CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())
