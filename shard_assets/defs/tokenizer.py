"""Asset tokenizer: a pretrained tokenizer or a BPE trained on the raw documents, stored under its
fingerprint and made the store's current tokenizer (the pointer record every later asset reads)."""

from typing import Any

import dagster as dg

from ..lib.errors import TokenizerError
from ..lib.layout import tokenizer_key
from ..lib.raw_writer import current_raws
from ..lib.discovery import registered
from ..lib.records import PartitionRecord
from ..lib.spec import DatasetSpec
from ..lib.state import registered_partitions
from ..lib.store import ObjectStore
from ..lib.tokenizer import (
    TrainingReads,
    build_tokenizer,
    current_record,
    pinned_tokenizer,
    store_tokenizer,
    store_training_sample,
    tokenizer_change,
    tokenizer_forecast,
    training_texts,
)
from .code_versions import CODE_VERSIONS
from .conventions import DATASET_ASSET
from .automation import FIRST_TOKENIZER
from .raw_documents import raw_documents
from .resources import DatasetResource, StoreResource


KEEPS_TOKEN_IDS = "keeps_token_ids"
KEEPS_TOKEN_IDS_TEXT = (
    "Whether materialising tokenizer now keeps the current one (warns when it would replace it, so every token id "
    "would change): evaluated with each materialization and whenever the sensor registers new or changed files."
)


def keeps_token_ids(objects: ObjectStore, spec: DatasetSpec, records: dict[str, PartitionRecord]) -> dict[str, Any]:
    """The keeps_token_ids result now, given the registered partitions: a warning naming the change and how to keep the
    current tokenizer. As the fields an AssetCheckResult (the asset's) and an AssetCheckEvaluation (the sensor's)
    share."""
    forecast = tokenizer_forecast(objects, spec.tokenizer, records)
    return {
        "check_name": KEEPS_TOKEN_IDS,
        "passed": forecast is None,
        "severity": dg.AssetCheckSeverity.WARN,
        "description": forecast or "materialising tokenizer now keeps the current one: token ids unchanged",
        "metadata": {"forecast": forecast or "kept"},
    }


@dg.asset(
    deps=[raw_documents],
    check_specs=[dg.AssetCheckSpec(KEEPS_TOKEN_IDS, asset="tokenizer", description=KEEPS_TOKEN_IDS_TEXT)],
    code_version=CODE_VERSIONS.tokenizer,
    automation_condition=FIRST_TOKENIZER,
    **DATASET_ASSET,
    kinds={"huggingface"},
    tags={"stage": "tokenizer"},
    description=(
        "A pretrained tokenizer (transformers) or a byte-level BPE trained on the raw documents. "
        "Materialising it again with a changed result (a BPE retrained on new files) changes every token id and "
        "re-tokenizes every partition; its `change` metadata says so. To keep one, pin it: "
        '`[tokenizer] fingerprint = "<its fingerprint>"`.'
    ),
)
def tokenizer(
    context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource
) -> dg.MaterializeResult:  # type: ignore[type-arg]  # Dagster reads the annotation: it must be the bare class
    spec, objects = dataset.spec(), store.store()
    raws = current_raws(objects, spec)  # the spec's current sources only, each from the files it is registered with now
    pin = spec.tokenizer.fingerprint
    if spec.tokenizer.kind == "train_bpe" and not raws and not pin:
        partitions = registered_partitions(objects)
        why = (
            f"none of the {len(partitions)} registered partitions has raw documents (their ingest failed: see the "
            "ingest runs' errors)"
            if partitions
            else "no partition is registered (run `shard-assets discover` or turn on raw_files_sensor)"
        )
        raise TokenizerError(f"no raw_documents to train the BPE on: {why}; materialise raw_documents first")
    reads = TrainingReads()
    if pin:
        text, record = pinned_tokenizer(objects, pin)
    else:
        text, record = build_tokenizer(spec.tokenizer, training_texts(objects, raws, reads))
    change = tokenizer_change(objects, current_record(objects), record)
    records = registered(objects, spec)
    if reads.started:  # what it was trained on, so a later build can tell beforehand whether it would train another
        store_training_sample(objects, record.fingerprint, reads.sample(records))
    store_tokenizer(objects, text, record)
    if change:
        context.log.warning(change)
    context.log.info(
        f"tokenizer {record.name} ({record.fingerprint}) made current, pinned by [tokenizer].fingerprint"
        if pin
        else f"tokenizer {record.name} ({record.fingerprint}, {record.vocab_size:,} ids) made current, trained on "
        f"{len(raws)} partitions"
        if spec.tokenizer.kind == "train_bpe"
        else f"tokenizer {record.name} ({record.fingerprint}) made current"
    )
    return dg.MaterializeResult(
        data_version=dg.DataVersion(record.fingerprint),
        check_results=[dg.AssetCheckResult(**keeps_token_ids(objects, spec, records))],
        metadata={
            "fingerprint": record.fingerprint,
            "name": record.name,
            "vocab_size": record.vocab_size,
            "eod_id": record.eod_id,
            "token_dtype": record.token_dtype,
            "key": tokenizer_key(record.fingerprint),
            "trained_on_partitions": 0 if pin else len(raws),
            "pinned": bool(pin),
            "change": change or "none: the current tokenizer is kept (token ids unchanged)",
        },
    )
