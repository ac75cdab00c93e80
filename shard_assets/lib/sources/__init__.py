"""Raw sources: listing their files as partitions, and reading their documents in batches."""
