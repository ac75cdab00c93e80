"""Every asset's code version, in one place: the assets declare them and the manifest's lineage records them.
Bump one when what its asset writes changes; Dagster then shows it and everything downstream as changed."""

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CodeVersions:
    raw_documents: str = "raw-3"  # normalisation keeps lone-CR line breaks and replaces lone surrogates
    tokenizer: str = "tokenizer-1"
    eval_index: str = "eval-index-1"
    dedup: str = "dedup-1"
    tokenized_shards: str = "tokenized-4"  # copies left out (dedup); whole documents, behind the exactness guard
    splits: str = "splits-2"
    manifest: str = "manifest-3"  # 3: manifest format 2 (shard tables, lineage file)

    def by_asset(self) -> dict[str, str]:
        """{asset name: code version}, as the manifest's lineage records them."""
        return asdict(self)


CODE_VERSIONS = CodeVersions()
