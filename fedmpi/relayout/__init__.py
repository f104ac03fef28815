"""Moving a run between layouts: a checkpoint written by parties of some rank counts continued by parties of
others (docs/CLUSTER.md, "Resuming on another allocation"). No torch at import: the launch's checks use
`batch`; `shards` and `party_state` import torch where they compute."""
