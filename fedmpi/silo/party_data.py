"""A party's data on one of its trainer ranks: the party's training set (its parts concatenated for the
centralized union) and this rank's batches of the party's stream, resumable at any step."""
from __future__ import annotations

import torch

from fedmpi.layout import Party, rank_batch


def open_party_sets(party: Party, data_cfg):
    """(training set, held-out set or None): the party's set (its parts concatenated for the centralized union),
    without the first data.heldout images of each identity, which are its personalised test images."""
    from fedmpi.data import ConcatFaceDataset, open_training_set
    from fedmpi.data.combined import heldout_split

    sets = [open_training_set(spec, data_cfg) for spec in party.specs]
    dataset = sets[0] if len(sets) == 1 else ConcatFaceDataset(sets)
    return heldout_split(dataset, data_cfg.heldout) if data_cfg.heldout else (dataset, None)


def open_party_dataset(party: Party, data_cfg):
    """The party's training set (its held-out images excluded)."""
    return open_party_sets(party, data_cfg)[0]


def batch_stream(dataset, party: Party, rank: int, cfg, start_step: int, device, seed=None, steps_per_pass: int = 0):
    """Batches of this rank's shard, resumable at any step; a DataLoader, with workers on a GPU (data.workers),
    decoding in its workers (data.decoder=cpu) or on the rank's GPU (gpu: the workers only read the records).
    `seed`, `steps_per_pass`: a stream of its own (a round's, ShardBatchSampler) instead of the party's."""
    from fedmpi.data import ShardBatchSampler
    from fedmpi.models.heads import check_label_range

    sampler = ShardBatchSampler(len(dataset), party.ranks.index(rank), len(party.ranks), rank_batch(cfg, party.name),
                                seed=cfg.data.seed + 7919 * party.index if seed is None else seed,
                                start_step=start_step, steps_per_pass=steps_per_pass)
    on_device = cfg.data.decodes_on(device)
    if on_device:
        from fedmpi.data.device_decode import EncodedItems, decode_items, keep_items

        items, collate = EncodedItems(dataset), keep_items
    else:
        items, collate = dataset, None
    workers = cfg.data.loader_workers(device)
    loader = torch.utils.data.DataLoader(items, batch_sampler=sampler, num_workers=workers, collate_fn=collate,
                                         pin_memory=device.type == "cuda" and not on_device,
                                         persistent_workers=workers > 0,
                                         # workers started from a clean server process, not forked from a rank
                                         # whose MPI, CUDA and NCCL are running (fork copies their threads' locks)
                                         multiprocessing_context="forkserver" if workers > 0 and device.type == "cuda"
                                         else None,
                                         # its own generator: starting the stream draws nothing from the global
                                         # torch RNG, which a resumed run has just restored
                                         generator=torch.Generator().manual_seed(cfg.data.seed))
    for batch in loader:
        images, labels = decode_items(batch, dataset, device) if on_device else batch
        if device.type != "cpu":    # here on the host, not by the classifier on the device (a sync per step)
            check_label_range(labels, dataset.num_classes)
        yield images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
