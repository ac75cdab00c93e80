"""Small JSON records the assets leave beside their data, so later assets (and other machines) can read them.

They make each asset's output self-describing in the store, with no dependence on where
a previous step ran.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import PublishError
from .store import ObjectStore


def put_record(store: ObjectStore, key: str, record: dict[str, Any]) -> None:
    store.put_bytes(key, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())


def get_record(store: ObjectStore, key: str, needed_by: str) -> dict[str, Any]:
    if not store.exists(key):
        raise PublishError(f"{needed_by}: {key} is missing from {store.describe()}; materialise its asset first")
    try:
        return json.loads(store.get_bytes(key))
    except ValueError as exc:
        raise PublishError(f"{needed_by}: {key} is not valid JSON ({exc})") from None
