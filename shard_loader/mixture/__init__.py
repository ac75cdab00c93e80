"""Mixtures: several published datasets served as one stream by weight (`TokenDataset(mixture URL)`).

The mixture file's records and parser are the published format's (format/mixture.py). opening.py reads the file and
its components' pinned manifests; components.py sees each component as an endless stream in its own (seed, epoch)
order; interleave.py picks each sample's component; plan.py and state.py hold a rank's plan and the saved position;
serving.py holds windows open while a consumer reads; dataset.py is the MixtureStream; info.py is what
`shard-loader info` prints. docs/loader.md tells the whole story.
"""
