"""What every dataset asset shares in the UI: its group and its owners."""

from typing import TypedDict


class AssetConventions(TypedDict):
    group_name: str
    owners: list[str]


DATASET_ASSET: AssetConventions = {"group_name": "dataset", "owners": ["team:data-engineering"]}
