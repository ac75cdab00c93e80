"""Asset tokenized_shards: each partition tokenized into a train and a val shard (`.npy` tokens + `.bin`
offsets) under content-hashed keys; a failure is quarantined in the store with its error. The work is
lib/shard_build.py's `tokenize_partitions`; this module reads the context and reports each partition."""

from typing import Any

import dagster as dg

from ..execution.dagster_private import add_partition_metadata
from ..lib.store import ObjectStore
from ..lib.shard_build import TokenizedPartition, TokenizeJob, tokenize_partitions
from .automation import RETOKENIZE
from .dedup import dedup, decision_metadata
from .eval_index import curation_metadata
from .code_versions import CODE_VERSIONS
from .conventions import DATASET_ASSET
from .figures import markdown_list, size, split_figures
from .partitions import BACKFILL_POLICY, raise_failures, raw_files, run_data_version
from .raw_documents import raw_documents
from .resources import DatasetResource, StoreResource
from .tokenizer import tokenizer


def partition_metadata(done: TokenizedPartition, store: ObjectStore) -> dict[str, Any]:
    """What the UI shows for one partition: its documents and tokens per split, sizes, speed, the engine and its
    guard."""
    stats, record, guard = done.stats, done.record, done.stats.guard
    return {
        **split_figures(stats.tokens, stats.documents),
        "shard_size": size(sum(e.nbytes for e in record.shards.values())),
        "max_token_id": record.max_token_id,
        "tokenize_seconds": round(stats.seconds, 3),
        "tokens_per_second": round(stats.tokens_per_second),
        "sample_documents": markdown_list(done.samples),
        "encoder_engine": guard.engine,
        "encoder_version": guard.engine_version,
        "encoder_reason": guard.engine_reason,
        "encoder_sampled": guard.sampled,  # documents re-encoded with the reference and compared
        "encoder_differing": guard.differing,
        "reencoded_with_reference": guard.reencoded_with_reference,
        **decision_metadata(record.dedup),
        **curation_metadata(store, record.curation),
        "dagster/row_count": sum(stats.documents.values()),
    }


@dg.asset(
    partitions_def=raw_files,
    backfill_policy=BACKFILL_POLICY,
    deps=[raw_documents, dedup, tokenizer],
    code_version=CODE_VERSIONS.tokenized_shards,
    automation_condition=RETOKENIZE,
    **DATASET_ASSET,
    kinds={"numpy"},
    tags={"stage": "tokenize"},
    pool="tokenize",
    description="Token ids of one raw partition, each document followed by the end-of-document id, split train/val by "
    "document hash.",
)
def tokenized_shards(
    context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource
) -> dg.MaterializeResult[None]:
    job = TokenizeJob.current(store.store(), dataset.spec(), context.run.run_id, CODE_VERSIONS.tokenized_shards)
    outcome = tokenize_partitions(job, context.partition_keys, context.log)
    for done in outcome.stored:
        add_partition_metadata(context, done.record.partition, partition_metadata(done, job.store))
    raise_failures(context, outcome.failed)
    tokens = sum(sum(d.stats.tokens.values()) for d in outcome.stored)  # one line a run: each partition's is metadata
    seconds = sum(d.stats.seconds for d in outcome.stored)
    context.log.info(f"{len(outcome.stored)} partitions: {tokens:,} tokens in {seconds:.1f} s")
    return dg.MaterializeResult(
        data_version=dg.DataVersion(run_data_version(d.record.data_version for d in outcome.stored)),
        metadata={"tokenizer_fingerprint": job.tokenizer.fingerprint},
    )
