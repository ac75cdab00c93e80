"""Asset eval_index: the word n-grams of the eval sets ([decontaminate].against), stored under a key named by their
content, whose hash is the asset's data version: a changed eval file re-runs decontamination and what follows it
(dedup, tokenize, publish), never ingest. And the curation figures each partition shows in the UI."""

from typing import Any

import dagster as dg

from ..lib.curation.curation_records import CuratedRecord
from ..lib.curation.decontamination import build_eval_index, store_eval_index
from ..lib.curation.filters import RULES
from ..lib.ownership import claim
from ..lib.store import ObjectStore
from .code_versions import CODE_VERSIONS
from .conventions import DATASET_ASSET
from .figures import markdown_list, size
from .resources import DatasetResource, StoreResource


def _link(store: ObjectStore, key: str) -> dg.MetadataValue:
    url = f"{store.loader_url().rstrip('/')}/{key}"
    return dg.MetadataValue.url(url) if "://" in url else dg.MetadataValue.path(url)


def curation_metadata(store: ObjectStore, record: CuratedRecord | None) -> dict[str, Any]:
    """What the UI shows of a partition's curation: documents each filter rule dropped (and texts rewritten, the
    guard's agreement), documents dropped per eval set and against which index, and a link to a few dropped
    documents per rule with what matched."""
    if record is None:
        return {}
    meta: dict[str, Any] = {"curation_samples": _link(store, record.samples)} if record.samples else {}
    if f := record.filters:
        meta |= {f"filter_dropped_{rule}": f.dropped.get(rule, 0) for rule in RULES}
        meta |= {"filter_rewritten": f.rewritten, "filter_guard": f"{f.agreed} of {f.sampled} agree with spaCy's words"}
    if d := record.decontamination:
        meta |= {
            "decontamination_dropped": sum(d.dropped.values()),
            "decontamination_by_eval_set": markdown_list(f"`{s}`: {n:,}" for s, n in d.dropped.items()),
            "eval_version": d.eval_version,
        }
    return meta


@dg.asset(
    code_version=CODE_VERSIONS.eval_index,
    **DATASET_ASSET,
    kinds={"numpy"},
    tags={"stage": "curate"},
    description="The eval sets' word n-grams (lower-cased, punctuation removed) that decontamination drops documents "
    "for sharing; versioned by the passages' content.",
)
def eval_index(dataset: DatasetResource, store: StoreResource) -> dg.MaterializeResult[None]:
    spec, objects = dataset.spec(), store.store()
    if spec.decontaminate is None:
        return dg.MaterializeResult(data_version=dg.DataVersion("off"), metadata={"decontaminate": "off"})
    index = build_eval_index(spec)  # a bad eval set fails here, before the store is claimed or written
    claim(objects, spec.name, spec.origin)
    store_eval_index(objects, index)
    return dg.MaterializeResult(
        data_version=dg.DataVersion(index.version),
        metadata={
            "eval_version": index.version,
            "eval_sets": markdown_list(f"`{n}`" for n in index.names),
            "passages": index.passages,
            "ngram": index.ngram,
            "ngrams": len(index.grams.hashes),
            "memory": size(index.nbytes),
            "key": _link(objects, index.key),
        },
    )
