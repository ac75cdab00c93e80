"""Asset: the tokenizer, stored under its fingerprint with vocab size, end-of-document id and token dtype."""

import json
from collections.abc import Iterator

import dagster as dg

from ..automation import FIRST_TOKENIZER
from ..errors import TokenizerError
from ..layout import raw_key, tokenizer_info_key, tokenizer_key
from ..partitions import raw_files
from ..resources import DatasetResource, StoreResource
from ..sources.listing import split_partition_key
from ..store import ObjectStore
from ..tokenizer import TokenizerRecord, build_tokenizer
from .raw import raw_documents

CODE_VERSION = "tokenizer-1"
TOKENIZER_KEY = dg.AssetKey("tokenizer")


def _training_texts(store: ObjectStore, partitions: list[str], max_bytes: int) -> Iterator[str]:
    """Raw documents in partition order, up to `max_bytes` of text."""
    import pyarrow.parquet as pq

    budget = max_bytes
    for partition in sorted(partitions):
        with store.open_read(raw_key(*split_partition_key(partition))) as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=1000, columns=["text"]):
                for text in batch.column(0).to_pylist():
                    yield text
                    budget -= len(text)
                    if budget <= 0:
                        return


@dg.asset(
    deps=[raw_documents],
    code_version=CODE_VERSION,
    automation_condition=FIRST_TOKENIZER,
    group_name="dataset",
    kinds={"huggingface"},
    description="A pretrained tokenizer (transformers) or a byte-level BPE trained on the raw documents.",
)
def tokenizer(context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource) -> dg.MaterializeResult:
    spec, objects = dataset.spec(), store.store()
    partitions = context.instance.get_dynamic_partitions(raw_files.name)
    if spec.tokenizer.kind == "train_bpe" and not partitions:
        raise TokenizerError("no raw_documents partitions are registered to train the BPE on; discover sources first")
    text, record = build_tokenizer(spec.tokenizer, _training_texts(objects, partitions, spec.tokenizer.train_max_bytes))
    objects.put_bytes(tokenizer_key(record.fingerprint), text.encode())
    objects.put_bytes(tokenizer_info_key(record.fingerprint), record.to_json())
    return dg.MaterializeResult(
        data_version=dg.DataVersion(record.fingerprint),
        metadata={
            "fingerprint": record.fingerprint,
            "name": record.name,
            "vocab_size": record.vocab_size,
            "eod_id": record.eod_id,
            "token_dtype": record.token_dtype,
            "key": tokenizer_key(record.fingerprint),
        },
    )


def current_tokenizer(instance: dg.DagsterInstance, store: ObjectStore) -> TokenizerRecord:
    """The record of the latest materialised tokenizer, read back from the store."""
    event = instance.get_latest_materialization_event(TOKENIZER_KEY)
    if event is None or event.asset_materialization is None:
        raise TokenizerError("the tokenizer asset has never been materialised; materialise it before tokenizing")
    fingerprint = event.asset_materialization.metadata["fingerprint"].value
    return TokenizerRecord(**json.loads(store.get_bytes(tokenizer_info_key(fingerprint))))
