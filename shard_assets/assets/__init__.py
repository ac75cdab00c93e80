"""The software-defined assets, in build order: raw documents, tokenizer, tokenized shards, splits, manifest."""
