"""Moving a run between layouts: a checkpoint written by parties of some rank counts continued by parties of
others (docs/CLUSTER.md, "Resuming on another allocation"): the classifier's shards re-split (`shards`), a
rank's part of its party's state (`party_state`), a checkpoint re-split offline (`offline`). A party's batch per
step, which such a move keeps, is the layout's (fedmpi/layout.py); what a checkpoint recorded of it is the
store's (store/party_batches.py)."""
