"""The one codec every stored record goes through: each record type round-trips as named fields and compact
(positional), a wrong value names the key and the path to the field, and records written before a field
existed still read. Every record type the builder stores is in shard_assets.lib.records."""

import json

import pytest

from shard_assets.lib import records
from shard_assets.lib.errors import RecordError
from shard_assets.lib.curation.curation_records import Decontamination
from shard_assets.lib.records import (
    CuratedRecord,
    DedupDecision,
    DedupMember,
    DedupMembers,
    DatasetOwner,
    DiscoveryIndex,
    FilePiece,
    FileRef,
    GuardResult,
    IngestFailure,
    PartitionRecord,
    PartRecord,
    Quarantine,
    RawRecord,
    ShardEntry,
    SourceFileRef,
    SplitProof,
    SplitsRecord,
    SplitTotals,
    TokenizerRecord,
    TrainingSample,
    decode,
    from_dict,
    to_json,
)

SOURCE = SourceFileRef("/data/web/a.jsonl", "mtime:1:2", 120)
RAW = RawRecord("web.a", "web", SOURCE, "raw/web/a-0123.parquet", "ab" * 32, 10, "v1", "run-1", (SOURCE,))
ENTRY = ShardEntry("web.a", 100, 10, FileRef("t/train/a.npy", 328, "cd" * 32), FileRef("t/train/a.bin", 88, "ef" * 32))
GUARD = GuardResult("fastokens", "0.3.5", "verified pattern", 10, 100, 3, 30, 0, None, "fail")
EXAMPLES = [
    TokenizerRecord("bpe-300", "0123456789abcdef", 300, 0, "uint16"),
    TrainingSample(("web.a@mtime:1:2", "web.b@etag:x:9"), True),
    SOURCE,
    FilePiece("/data/web/big.parquet", "etag:x:9", 9000, (2, 5)),
    PartitionRecord(
        "web",
        (
            FilePiece("/data/web/a.jsonl", "mtime:1:2", 120),
            FilePiece("/data/web/big.parquet", "etag:x:9", 9000, (0, 2)),
        ),
    ),
    DiscoveryIndex("web", "web.a", {"web.a": (FilePiece("/data/web/a.jsonl", "mtime:1:2", 120),), "web.b": ()}),
    RAW,
    GUARD,
    PartRecord(
        "web.a", "0123456789abcdef", 0.2, RAW, {"train": ENTRY, "val": ENTRY}, 299, "v2", "run-2", "tokenized-3", GUARD
    ),
    PartRecord(
        "web.a",
        "0123456789abcdef",
        0.2,
        RAW,
        {"train": ENTRY, "val": ENTRY},
        299,
        "v2",
        "run-2",
        "tokenized-3",
        None,
        SplitProof(0.2, 8, 2, 1 << 52, 3),
    ),
    SplitProof(0.2, 10, 0, 1 << 52, None),
    IngestFailure("web.c", "/data/web/c.jsonl:2: not a JSON object", "run-4", SOURCE),
    Quarantine("web.d", "0123456789abcdef", "its source file /data/web/d.jsonl vanished", "run-5", "select"),
    DatasetOwner("web", "/specs/web.toml", "2026-11-22T12:00:00Z"),
    Quarantine("web.b", "0123456789abcdef", "web.b: field 'text' is missing", "run-3"),
    SplitsRecord(
        "0123456789abcdef",
        0.2,
        ("web.a",),
        {"train": SplitTotals(100, 10, 1), "val": SplitTotals(0, 0, 0)},
        0,
        {"web.b": "quarantined"},
    ),
    MEMBER := DedupMember(1, "ab" * 32),
    DedupMembers('{"exact":true}', 3, {"web.a": MEMBER}, {"exact": (0, 2)}, 2),
    DEDUP := DedupDecision(
        "web.b", "cd" * 32, '{"exact":true}', 10, {"exact": {"web.a": 2}}, {"web.c": 1}, FileRef("k.npz", 8, "ef" * 32)
    ),
    PartRecord(
        "web.b", "0123456789abcdef", 0.2, RAW, {"train": ENTRY, "val": ENTRY}, 299, "v", "r", "t", None, None, DEDUP
    ),
    CURATED := CuratedRecord(
        "web.c",
        "ab" * 32,
        '{"decontaminate":["drop",13,"0123"]}',
        8,
        FileRef("curated/web/c-01.parquet", 80, "cd" * 32),
        Decontamination("0123", "state/curation/eval/0123.npz", 13, {"mmlu": 2}),
        samples="state/curation/samples/web.c.json",
    ),
    PartRecord("web.c", "0123", 0.2, RAW, {"train": ENTRY, "val": ENTRY}, 299, "v", "r", "t", curation=CURATED),
]


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("record", EXAMPLES, ids=lambda r: type(r).__name__)
def test_every_record_round_trips_through_the_codec(record, compact):
    assert decode(type(record), to_json(record, compact), "key.json") == record


def test_the_record_module_holds_every_record_type_the_builder_stores():
    stored = {
        name
        for name, value in vars(records).items()
        if isinstance(value, type) and hasattr(value, "__dataclass_fields__")
    }
    assert stored - {"FileRef", "ShardEntry"} == {type(r).__name__ for r in EXAMPLES} | {"SplitTotals"}


@pytest.mark.parametrize(
    "data, message",
    [
        ({"partition": "p"}, r"raw/web/a.json: missing field 'source'"),
        ({**json.loads(to_json(RAW)), "documents": "10"}, r"raw/web/a.json.documents: expected int, got '10'"),
        (
            {**json.loads(to_json(RAW)), "source_file": {"uri": 5, "fingerprint": "f"}},
            r"raw/web/a.json.source_file.uri: expected str, got 5",
        ),
        (
            {**json.loads(to_json(RAW)), "source_files": [json.loads(to_json(SOURCE)), 7]},
            r"raw/web/a.json.source_files\[1\]: expected an object, got int",
        ),
        ({**json.loads(to_json(RAW)), "documents": True}, r"raw/web/a.json.documents: expected int, got True"),
        (
            ["web.a", "web", json.loads(to_json(SOURCE))] + [None] * 8,
            r"raw/web/a.json: expected at most 10 fields, got 11",
        ),
        ([], r"raw/web/a.json: missing field 'partition'"),
    ],
)
def test_a_wrong_value_names_the_key_and_the_path_to_the_field(data, message):
    with pytest.raises(RecordError, match=message):
        from_dict(RawRecord, data, "raw/web/a.json")


def test_a_fixed_size_tuple_is_checked_and_a_record_written_before_a_field_existed_still_reads():
    with pytest.raises(RecordError, match=r"p.json.row_groups: expected 2 items, got 3"):
        from_dict(FilePiece, {"uri": "u", "fingerprint": "f", "row_groups": [1, 2, 3]}, "p.json")
    older = {k: v for k, v in json.loads(to_json(RAW)).items() if k != "source_files"}
    assert from_dict(RawRecord, older, "raw/web/a.json").source_files == ()
    assert from_dict(
        SplitTotals, {"tokens": 1, "documents": 1, "shards": 1, "newer": "ignored"}, "s.json"
    ) == SplitTotals(1, 1, 1)


def test_invalid_json_is_a_record_error_naming_the_key():
    with pytest.raises(RecordError, match=r"state/tokenizer.json: not valid JSON"):
        decode(TokenizerRecord, b"{not json", "state/tokenizer.json")
