"""Moving a checkpoint between rank counts, piece by piece (one process): the party's stream and BatchNorm
groups do not depend on its rank count; a classifier's shards merge and split bit for bit; the resume check
takes rank counts out of the signature (old checkpoints included) and refuses a changed batch per step in one
line naming the numbers."""
from __future__ import annotations

import copy
import itertools
import json

import h5py
import pytest
import torch

from fedmpi.layout import build_layout
from fedmpi.config import load_config, to_yaml
from fedmpi.data import ShardBatchSampler
from fedmpi.models.bn_groups import normalise_in_groups
from fedmpi.models.class_centres import init_class_centres, shard_bounds
from fedmpi.models.iresnet import iresnet
from fedmpi.relayout.shards import merge_parts, reshard, split_part
from fedmpi.store.manifest import ResumeError
from fedmpi.store.party_batches import check_party_batches
from fedmpi.store.resume import check_compatible, config_changes, run_signature, saved_config


def party_batches(n: int, world: int, batch: int, steps: int, start: int = 0) -> list[list[tuple[int, bool]]]:
    """The party's batch of each step in stream order: rank r's j-th item is position j * world + r."""
    streams = [list(itertools.islice(iter(ShardBatchSampler(n, r, world, batch, seed=5, start_step=start)), steps))
               for r in range(world)]
    out = []
    for k in range(steps):
        step = [None] * (world * batch)
        for r in range(world):
            step[r::world] = streams[r][k]
        out.append(step)
    return out


def test_the_party_stream_does_not_depend_on_its_rank_count():
    one = party_batches(37, 1, 12, 10)                  # passes of 37 items: batches cross pass boundaries
    assert one == party_batches(37, 2, 6, 10) == party_batches(37, 3, 4, 10) == party_batches(37, 4, 3, 10)
    assert party_batches(37, 3, 4, 6, start=4) == one[4:]          # resumed at step 4 on another rank count
    assert len({i for b in one[:3] for i, _ in b}) == 36           # the first pass: distinct items
    assert one != party_batches(37, 1, 12, 10, start=1)[:10]


def test_bn_groups_normalise_the_same_images_on_one_rank_as_on_two():
    torch.manual_seed(0)
    net = iresnet("ir18", embedding_size=8, input_size=16, width=0.125).double()
    x = torch.randn(8, 3, 16, 16, dtype=torch.float64)
    one = copy.deepcopy(net)
    normalise_in_groups(one, 8, 4)
    two = [copy.deepcopy(net) for _ in range(2)]
    y = one(x)
    assert torch.allclose(y[0::2], two[0](x[0::2]), rtol=1e-12, atol=1e-12)
    assert torch.allclose(y[1::2], two[1](x[1::2]), rtol=1e-12, atol=1e-12)
    # the running statistics follow group 0, the leader's
    for a, b in zip(one.buffers(), two[0].buffers()):
        assert torch.allclose(a.double(), b.double(), rtol=1e-12, atol=1e-15)
    plain = copy.deepcopy(net)
    normalise_in_groups(plain, 8, 8)                               # one group: plain BatchNorm, untouched
    assert torch.equal(plain(x), copy.deepcopy(net)(x))
    with pytest.raises(ValueError, match=r"6 images per rank are not a multiple of model.bn_batch=4"):
        normalise_in_groups(copy.deepcopy(net), 6, 4)


def shard_parts(classes: int, shards: int, width: int = 5) -> list[dict]:
    parts = []
    for k in range(shards):
        start, end = shard_bounds(classes, shards, k)
        weight = init_class_centres(7, start, end, width)
        parts.append({"classifier": {"weight": weight},
                      "classifier_optimizer": {"state": {0: {"momentum_buffer": weight * 0.5 + k}},
                                               "param_groups": [{"lr": 0.1, "params": [0]}]},
                      "precision": {"scale": 1.0}, **({"algorithm": {"m": torch.ones(3)}} if k == 0 else {})})
    return parts


def test_merged_classifier_is_the_concatenation_of_the_shards_and_the_whole_initial_one():
    parts = shard_parts(11, 3)
    merged = merge_parts(parts, replicated=False)
    assert torch.equal(merged["classifier"]["weight"], torch.cat([p["classifier"]["weight"] for p in parts]))
    assert torch.equal(merged["classifier"]["weight"], init_class_centres(7, 0, 11, 5))
    assert torch.equal(merged["classifier_optimizer"]["state"][0]["momentum_buffer"],
                       torch.cat([p["classifier_optimizer"]["state"][0]["momentum_buffer"] for p in parts]))


@pytest.mark.parametrize("before, after", [(3, 4), (4, 3), (8, 4), (2, 1), (1, 2), (3, 3)])
def test_resplit_round_trips_bit_for_bit(before, after):
    parts = shard_parts(11, before)
    moved = reshard(parts, after, False, False)
    assert [p["classifier"]["weight"].shape[0] for p in moved] == [b - a for a, b in
                                                                   (shard_bounds(11, after, k) for k in range(after))]
    assert ["algorithm" in p for p in moved] == [True] + [False] * (after - 1)
    back = reshard(moved, before, False, False)
    for a, b in zip(parts, back):
        assert torch.equal(a["classifier"]["weight"], b["classifier"]["weight"])
        assert torch.equal(a["classifier_optimizer"]["state"][0]["momentum_buffer"],
                           b["classifier_optimizer"]["state"][0]["momentum_buffer"])


def test_a_replicated_classifier_moves_whole():
    whole = shard_parts(11, 1)[0]
    parts = [whole, copy.deepcopy(whole)]
    assert torch.equal(split_part(merge_parts(parts, True), 3, 2, True)["classifier"]["weight"],
                       whole["classifier"]["weight"])


TWO_PARTIES = ["parties=[{name: a, ranks: 2, data: {style: ms1m}}, {name: b, ranks: 1, data: {style: ga}}]",
               "optim.batch_size=8"]


def fake_checkpoint(tmp_path, cfg, layout, old_format: bool = False):
    folder = tmp_path / "round_000003"
    folder.mkdir()
    with h5py.File(folder / "server.h5", "w") as f:
        f.create_dataset("config", data=to_yaml(cfg))
    manifest = {"round": 3, "step": 6, "topology": layout.as_dict(), "signature": run_signature(cfg, layout)}
    if old_format:   # what a checkpoint of the earlier format holds: rank counts in the topology, no batches
        manifest["signature"]["topology"] = "1 server + a 2 + b 1"
    else:
        from fedmpi.layout import party_batches
        manifest["party_batches"] = party_batches(cfg, layout)
    return folder, manifest


@pytest.mark.parametrize("old_format", [False, True])
def test_a_resume_on_other_rank_counts_with_the_same_batch_per_step_is_accepted(tmp_path, old_format):
    saved = load_config(None, TWO_PARTIES)
    folder, manifest = fake_checkpoint(tmp_path, saved, build_layout(saved), old_format)
    cfg = load_config(None, [*TWO_PARTIES, "parties.a.ranks=1", "parties.a.batch_size=16"])
    layout = build_layout(cfg)
    check_compatible(folder, manifest, cfg, layout)
    assert check_party_batches(folder, manifest, saved_config(folder), cfg, layout, allowed=False) == {}
    assert config_changes(folder, cfg) == {}


def test_a_changed_batch_per_step_is_refused_in_one_line_naming_the_numbers(tmp_path):
    saved = load_config(None, TWO_PARTIES)
    folder, manifest = fake_checkpoint(tmp_path, saved, build_layout(saved))
    cfg = load_config(None, [*TWO_PARTIES, "parties.a.ranks=1"])
    layout = build_layout(cfg)
    with pytest.raises(ResumeError) as refused:
        check_party_batches(folder, manifest, saved_config(folder), cfg, layout, allowed=False)
    message = str(refused.value)
    assert "\n" not in message
    assert "party a: 2 x 8 = 16 images per step (ranks x batch per rank), this run 1 x 8 = 8" in message
    assert "--allow-config-changes" in message
    assert check_party_batches(folder, manifest, saved_config(folder), cfg, layout, allowed=True) == {
        "parties.a.images_per_step": ["2 x 8 = 16", "1 x 8 = 8"]}


def test_another_party_set_is_still_refused(tmp_path):
    saved = load_config(None, TWO_PARTIES)
    folder, manifest = fake_checkpoint(tmp_path, saved, build_layout(saved), old_format=True)
    cfg = load_config(None, ["parties=[{name: a, ranks: 2, data: {style: ms1m}}, {name: c, ranks: 1}]"])
    with pytest.raises(ResumeError, match=r"topology '1 server \+ a \+ b', this run has topology "
                                          r"'1 server \+ a \+ c'"):
        check_compatible(folder, manifest, cfg, build_layout(cfg))
    assert json.dumps(manifest)   # plain data


def test_the_slurm_requeue_fits_the_layout_into_a_smaller_allocation_keeping_batches_per_step():
    from jobs.fit_layout import fitting_ranks

    ranks, batches = {"ms1m": 8, "ga": 4, "vgg": 4}, {"ms1m": 512, "ga": 256, "vgg": 256}
    assert fitting_ranks(ranks, batches, [8, 8, 8], 0) == ranks                          # it fits as it is
    assert fitting_ranks(ranks, batches, [8, 8], 0) == {"ms1m": 4, "ga": 4, "vgg": 4}    # 16 GPUs: 13 ranks
    assert fitting_ranks(ranks, batches, [4, 4], 0) == {"ms1m": 2, "ga": 2, "vgg": 2}
    assert fitting_ranks({"a": 6}, {"a": 60}, [5], 0, bn_batch=20) == {"a": 3}           # 60 / 4, / 5: no
    with pytest.raises(ValueError, match=r"no layout with the parties' batches per step kept fits 2 slots"):
        fitting_ranks(ranks, batches, [2], 0)
