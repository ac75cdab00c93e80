"""What every dataset asset shares in the UI: its group and its owners."""

from typing import TypedDict


class AssetConventions(TypedDict):
    """Keyword arguments of `dg.asset` every dataset asset passes (typed, so `**DATASET_ASSET` type-checks)."""

    group_name: str
    owners: list[str]


DATASET_ASSET = AssetConventions(group_name="dataset", owners=["team:data-engineering"])
