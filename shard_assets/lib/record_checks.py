"""State read from the store checked against what it claims, before a build trusts it: a partition's registration
against its source (its files must be the source's and carry the partition's name), a part record against its
partition, its tokenizer and the content hashes its keys carry. A mismatch (a record edited by hand, or written by
another dataset) stops the build with one line (StateMismatchError) naming the key, the field and what to do.
The tokenizer pointer's check is `tokenizer.check_tokenizer_record`."""

from __future__ import annotations

from shard_loader.builder_api import SPLITS, shard_base_key, shard_content_hash

from .errors import StateMismatchError
from .layout import discovery_index_key, part_record_key, partition_record_key, raw_key
from .records import PartRecord, PartitionRecord
from .sources.listing import part_of, partition_key
from .spec import DatasetSpec


def check_registration(spec: DatasetSpec, partition: str, record: PartitionRecord) -> None:
    """`record` (the registration of `partition`) names files of the partition's source, one of which gives the
    partition its name (`<source>.<part>`, or `.rg<n>`/`.<n>` after it for slices and later files)."""
    where = partition_record_key(partition)
    source_name = partition.split(".", 1)[0]
    redo = (
        f"the registration was edited or written by another dataset: delete {discovery_index_key(source_name)} and run "
        f"discovery again (shard-assets discover, or the sensor) to register the source's files afresh"
    )
    if record.source != source_name:
        raise StateMismatchError(
            f"{where}: names source {record.source!r}, but partition {partition} is of source {source_name!r}; {redo}"
        )
    source = spec.source(source_name)
    keys = []
    for piece in record.pieces:
        part = part_of(source, piece.uri)
        if part is None:
            raise StateMismatchError(
                f"{where}: names {piece.uri}, which is not a file of source {source_name!r} ({source.uri}); {redo}"
            )
        keys.append(partition_key(source_name, part))
    if not any(partition == k or partition.startswith(f"{k}.") for k in keys):
        raise StateMismatchError(
            f"{where}: names {', '.join(p.uri for p in record.pieces)}, none of which is partition {partition}'s file; "
            f"{redo}"
        )


def check_part_record(part: PartRecord, partition: str, fingerprint: str) -> None:
    """`part` (read at `partition`'s part record key for tokenizer `fingerprint`) is that partition's, with that
    tokenizer, its raw parquet's key carries the raw sha256 it records, and every shard's keys carry the hash of the
    sha256s it records for them: a record edited by hand cannot name other files than the ones it describes."""
    where = part_record_key(fingerprint, partition)
    redo = f"the record was edited or written by another build: materialise tokenized_shards for {partition} again"
    if part.partition != partition or part.tokenizer_fingerprint != fingerprint:
        raise StateMismatchError(
            f"{where}: describes partition {part.partition} with tokenizer {part.tokenizer_fingerprint}; {redo}"
        )
    if part.raw.partition != partition or part.raw.key != raw_key(partition, part.raw.sha256[:16]):
        raise StateMismatchError(
            f"{where}: raw.key {part.raw.key} is not the key of raw sha256 {part.raw.sha256} for {partition}; {redo}"
        )
    for split in SPLITS:
        entry = part.shards.get(split)
        if entry is None:
            raise StateMismatchError(f"{where}: has no {split} shard; {redo}")
        base = shard_base_key(fingerprint, split, partition, shard_content_hash(entry.npy.sha256, entry.bin.sha256))
        if (entry.partition, entry.npy.key, entry.bin.key) != (partition, f"{base}.npy", f"{base}.bin"):
            raise StateMismatchError(
                f"{where}: shards.{split} names {entry.npy.key} and {entry.bin.key}, but the sha256s it records give "
                f"{base}.npy|.bin; {redo}"
            )
