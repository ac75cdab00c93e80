"""One prefix, one dataset: the first build into a store root records which dataset it holds (`state/dataset.json`,
written once with a conditional put), and a build of another dataset into that root is refused before it writes
anything. Two builds of one spec at once both find their own name there, whichever wrote it."""

from __future__ import annotations

from shard_loader.builder_api import LATEST_KEY, ShardLoaderError, parse_manifest

from .errors import PrefixOwnedError
from .layout import OWNER_KEY
from .records import DatasetOwner, find_record, get_record, to_json
from .store import ObjectMissingError, ObjectStore

# (store, dataset) pairs this process has checked: one read per run, not per call
_CLAIMED: set[tuple[str, str]] = set()


def _published_name(store: ObjectStore) -> str | None:
    """The dataset a root published before owner records existed (its live manifest's name); None if none."""
    try:
        return parse_manifest(store.get_bytes(LATEST_KEY), origin=LATEST_KEY).dataset
    except (ObjectMissingError, ShardLoaderError):
        return None


def _refuse(store: ObjectStore, owner: str, dataset: str, origin: str, where: str) -> PrefixOwnedError:
    return PrefixOwnedError(
        f"{store.describe()} holds dataset {owner!r} ({where}); refusing to build "
        f"{dataset!r}{f' ({origin})' if origin else ''} into it: "
        f"give {dataset!r} its own prefix (--store, DATASET_STORE_ROOT or DATASET_BINS_PATH), "
        f"or if {owner!r} was renamed to {dataset!r}, delete {OWNER_KEY} there first"
    )


def claim(store: ObjectStore, dataset: str, origin: str = "") -> None:
    """Make sure `store` holds `dataset` (the spec's name; `origin` its file, for messages): record it if the root holds
    no dataset yet, else refuse (PrefixOwnedError) a root that holds another one. Reads first, so a refused build
    writes nothing; the record is written once (If-None-Match), so of two racing builds one writes it and both read
    the winner's name."""
    if (store.describe(), dataset) in _CLAIMED:
        return
    owner = find_record(store, OWNER_KEY, DatasetOwner, "dataset owner")
    if owner is None:
        published = _published_name(store)
        if published is not None and published != dataset:
            raise _refuse(store, published, dataset, origin, f"its {LATEST_KEY}")
        store.put_bytes(OWNER_KEY, to_json(DatasetOwner.now(dataset, origin)), if_absent=True)
        owner = get_record(store, OWNER_KEY, DatasetOwner, "dataset owner")
    if owner.dataset != dataset:
        claimed = f"{OWNER_KEY}, claimed {owner.claimed_at} by {owner.spec or 'a build'}"
        raise _refuse(store, owner.dataset, dataset, origin, claimed)
    _CLAIMED.add((store.describe(), dataset))
