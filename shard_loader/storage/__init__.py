"""Stores a dataset is read from (a local folder, S3/R2, plain HTTP(S)), the one S3 client factory, and the
bounded, retried transfers every store shares."""

from .base import Store
from .local import LocalStore
from .urls import is_remote, open_store, split_manifest_url

__all__ = ["LocalStore", "Store", "is_remote", "open_store", "split_manifest_url"]
