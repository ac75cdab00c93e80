"""Keep credentials out of every message: known secret values from the environment are masked."""

from __future__ import annotations

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


def redact(text: str, extra: tuple[str, ...] = ()) -> str:
    """`text` with every secret value (from the environment, plus `extra`) replaced by ***."""
    for value in [os.environ.get(v, "") for v in SECRET_VARIABLES] + list(extra):
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text
