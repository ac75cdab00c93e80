"""Every key the builder reads or writes under the dataset root, built here and nowhere else. The published
files' keys (tokenizer, shards, manifests) come from shard_loader.format so builder and loader share them;
the builder's own records and state are below."""

from __future__ import annotations

import hashlib

from shard_loader.builder_api import LATEST_KEY, VERSIONS_DIR, check_key, shard_base_key, tokenizer_key, versioned_key
from shard_loader.builder_api import LINEAGE_DIR

__all__ = ["LATEST_KEY", "LINEAGE_DIR", "VERSIONS_DIR", "shard_base_key", "tokenizer_key", "versioned_key"]

RAW_PREFIX = "raw/"  # raw/<source>/<part>-<hash>.parquet and raw/<source>/<part>.json (the partition's raw record)
TOKENIZED_PREFIX = "tokenized/"
TOKENIZERS_PREFIX = "tokenizers/"
STATE_PREFIX = "state/"
OWNER_KEY = f"{STATE_PREFIX}dataset.json"  # which dataset this root holds: written once, by the first build
CURRENT_TOKENIZER_KEY = f"{STATE_PREFIX}tokenizer.json"  # the pointer record: which tokenizer is current in this store
PARTITIONS_PREFIX = f"{STATE_PREFIX}partitions/"


def raw_key(partition: str, content_hash: str) -> str:
    """A raw partition's normalised parquet; a changed source file gives a new key, never a rewrite."""
    source, _, part = partition.partition(".")
    return check_key(f"{RAW_PREFIX}{source}/{part}-{content_hash}.parquet", "raw key")


def raw_record_key(partition: str) -> str:
    """The record of the latest raw build of a partition: its parquet key, source file and counts."""
    source, _, part = partition.partition(".")
    return check_key(f"{RAW_PREFIX}{source}/{part}.json", "raw record key")


INGEST_FAILURES_PREFIX = f"{RAW_PREFIX}_failed/"  # no source name starts with `_`


def ingest_failure_key(partition: str) -> str:
    """The record of a partition whose ingest failed, all in one folder."""
    return check_key(f"{INGEST_FAILURES_PREFIX}{partition}.json", "ingest failure key")


def tokenizer_info_key(fingerprint: str) -> str:
    return check_key(f"tokenizers/{fingerprint}/info.json", "tokenizer info key")


def training_sample_key(fingerprint: str) -> str:
    """What a trained tokenizer read (a TrainingSample): how a build tells beforehand that it would train another."""
    return check_key(f"tokenizers/{fingerprint}/trained_on.json", "training sample key")


def parts_prefix(fingerprint: str) -> str:
    """The folder of the part records of one tokenizer."""
    return f"{TOKENIZED_PREFIX}{fingerprint}/parts/"


def part_record_key(fingerprint: str, partition: str) -> str:
    """The per-partition record of a tokenization: shard entries, counts, the raw file it came from."""
    return check_key(f"{parts_prefix(fingerprint)}{partition}.json", "part record key")


def quarantine_prefix(fingerprint: str) -> str:
    """The folder of the quarantine records of one tokenizer."""
    return f"{TOKENIZED_PREFIX}{fingerprint}/quarantine/"


def quarantine_key(fingerprint: str, partition: str) -> str:
    """The record of a partition left out of versions with this tokenizer: its tokenization failed, or the selection
    of a version left it out (failed, changed, vanished, removed)."""
    return check_key(f"{quarantine_prefix(fingerprint)}{partition}.json", "quarantine key")


def splits_record_key(fingerprint: str) -> str:
    return check_key(f"{TOKENIZED_PREFIX}{fingerprint}/splits.json", "splits record key")


def partition_record_key(partition: str) -> str:
    """A partition's registration, spread over 256 folders so no folder grows with the corpus."""
    bucket = hashlib.sha1(partition.encode()).hexdigest()[:2]
    return check_key(f"{PARTITIONS_PREFIX}{bucket}/{partition}.json", "partition registration key")


def partition_of_registration(key: str) -> str | None:
    """The partition a key under PARTITIONS_PREFIX registers, None for anything else there (records directly under
    the prefix predate the folders and are not registrations)."""
    rest = key[len(PARTITIONS_PREFIX) :] if key.startswith(PARTITIONS_PREFIX) else ""
    if rest.count("/") != 1 or not rest.endswith(".json"):
        return None
    return rest.split("/", 1)[1][: -len(".json")]


def discovery_index_key(source: str) -> str:
    """A source's partitions and their files in one object: what discovery compares a listing against."""
    return check_key(f"{STATE_PREFIX}discovery/{source}.json", "discovery index key")


def probe_key(token: str) -> str:
    """A short-lived object the store's preflight writes and deletes to prove its keys can write."""
    return check_key(f"{STATE_PREFIX}probes/{token}.json", "probe key")


DEDUP_PREFIX = f"{STATE_PREFIX}dedup/"  # the dedup index: never collected by gc, but for drop lists nothing names
DEDUP_DROPS_PREFIX = f"{DEDUP_PREFIX}drops/"
DEDUP_DECISIONS_PREFIX = f"{DEDUP_PREFIX}partitions/"
DEDUP_MEMBERS_KEY = f"{DEDUP_PREFIX}members.json"
DEDUP_LOCK_KEY = f"{DEDUP_PREFIX}update.lock"


def dedup_range_key(kind: str, index: int, generation: int) -> str:
    """One hash range of the dedup index of `kind` (exact or near) as of update `generation`: its rows, as npy."""
    return check_key(f"{DEDUP_PREFIX}{kind}/{index:05d}-{generation}.npy", "dedup range key")


def dedup_decision_key(partition: str) -> str:
    """A partition's dedup decision: what it drops and against which partition."""
    return check_key(f"{DEDUP_DECISIONS_PREFIX}{partition}.json", "dedup decision key")


def dedup_drops_key(partition: str, content_hash: str) -> str:
    """A partition's dropped document hashes, content-addressed: a decision names the list it was made with."""
    return check_key(f"{DEDUP_DROPS_PREFIX}{partition}-{content_hash}.npz", "dedup drops key")


CURATION_PREFIX = f"{STATE_PREFIX}curation/"  # the eval index, each partition's curated record and samples
CURATED_PREFIX = "curated/"  # curated parquets: what dedup and tokenize read where the curation dropped a document
CURATED_RECORDS_PREFIX = f"{CURATION_PREFIX}partitions/"
CURATION_SAMPLES_PREFIX = f"{CURATION_PREFIX}samples/"
EVAL_INDEX_PREFIX = f"{CURATION_PREFIX}eval/"
COLLECTED_STATE = (DEDUP_DROPS_PREFIX, CURATION_SAMPLES_PREFIX, EVAL_INDEX_PREFIX)  # of state/, gc deletes only these
COLLECTED_PREFIXES = (TOKENIZED_PREFIX, RAW_PREFIX, CURATED_PREFIX, f"{VERSIONS_DIR}/", *COLLECTED_STATE)


def eval_index_key(version: str) -> str:
    """The eval sets' n-gram index of one version (a hash of the passages read and the rule), as npz."""
    return check_key(f"{EVAL_INDEX_PREFIX}{version}.npz", "eval index key")


def curated_record_key(partition: str) -> str:
    """A partition's curation: what the stage dropped, and the parquet dedup and tokenize read."""
    return check_key(f"{CURATED_RECORDS_PREFIX}{partition}.json", "curated record key")


def curated_key(partition: str, content_hash: str) -> str:
    """A partition's curated parquet (text and doc_hash as in its raw parquet, with the filters dedup_hash too)."""
    source, _, part = partition.partition(".")
    return check_key(f"{CURATED_PREFIX}{source}/{part}-{content_hash}.parquet", "curated key")


def curation_samples_key(partition: str, content_hash: str) -> str:
    """A few documents the curation dropped with what matched, for a person to read (JSON)."""
    return check_key(f"{CURATION_SAMPLES_PREFIX}{partition}-{content_hash}.json", "curation samples key")
