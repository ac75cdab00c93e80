"""What every dataset asset shares in the UI: its group and its owners."""

DATASET_ASSET = {"group_name": "dataset", "owners": ["team:data-engineering"]}
