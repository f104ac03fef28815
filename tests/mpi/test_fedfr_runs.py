"""FedFR under mpirun (made in the tests' shared launch): party a of 2 ranks with the sharded classifier over its
identities and the public ones, party b of 1; a public set every party reads; the personalised evaluation of each
party's model after its local training (+ its converter) logged per round and per party. The server's w is the
parties' combined-set sizes (F5 through the real exchange); the personal state is in the leader's checkpoint part,
never in the upload. (Resumes, on the same and on other rank counts: tests/mpi/test_relayout_runs.py.)"""
import numpy as np
import torch

from algorithm_harness import checkpoint_parts, declare_rule
from fedmpi.metrics.personal import personal_columns
from fedmpi.store.h5log import LogReader

ROUNDS = 3
FEDFR = ["fed.algorithm=fedfr", "model.head=cosface", "model.scale=30", "model.margin=0.4",
         "data.public.kind=synthetic", "data.public.identities=6", "data.public.images_per_identity=4",
         "data.heldout=2", "eval.every=1", "data.val_sets=[lfw]", "optim.batch_size=2",
         "fed.options.first_epochs=2", "fed.options.min_epochs=1", "fed.options.epoch_step=1",
         "fed.options.first_decay=1", "fed.options.threshold=-1"]   # every public image a hard negative
RUN = declare_rule("fedfr", FEDFR, rounds=ROUNDS, K=1)


def test_fedfr_runs_with_a_sharded_two_rank_party_and_logs_its_rounds(shared_runs):
    run = shared_runs[RUN]
    with LogReader(run / "log.h5") as log:
        local, personal = log.table("local"), log.table("personal")
        described = {k: v for k, v in log.f["data"].attrs.items()}
    # party a: 7 identities x (4 - 2 held out) images, b: 5 x 2; every one of the 24 public images chosen
    assert local["combined_images"].tolist() == [[14 + 24, 10 + 24]] * ROUNDS
    assert local["hard_negatives"].tolist() == [[24, 24]] * ROUNDS
    assert local["local_epochs"].tolist() == [[2, 2], [1, 1], [1, 1]]
    # party a: 2 ranks x 2 images a step: 38 // 4 = 9 steps an epoch; b: 34 // 2 = 17
    assert local["local_steps"].tolist() == [[18, 34], [9, 17], [9, 17]]
    assert list(personal["round"]) == list(range(ROUNDS))
    for column in personal_columns([1e-3, 1e-2, 1e-1]):
        values = personal[column]
        assert values.shape == (ROUNDS, 2) and np.isfinite(values).all() and ((0 <= values) & (values <= 1)).all()
    assert "data.public" in described and '"held_by": "every party"' in described["data.public"]


def test_the_server_weighs_the_parties_by_their_combined_sets(shared_runs):
    w = checkpoint_parts(shared_runs[RUN], ROUNDS)["server.h5"]["w"]
    assert torch.allclose(w, torch.tensor([38 / 72, 34 / 72], dtype=w.dtype), rtol=0, atol=1e-15)


def test_the_partys_classifier_holds_its_rows_then_the_public_ones_and_its_state_stays_home(shared_runs):
    parts = checkpoint_parts(shared_runs[RUN], ROUNDS)
    shards = [parts[f"party-a-{k}.h5"]["classifier"]["weight"] for k in range(2)]
    assert [s.shape[0] for s in shards] == [7, 6]                 # 7 own + 6 public rows over 2 ranks
    leader = parts["party-a-0.h5"]["algorithm"]
    assert set(leader) == {"momentum", "previous", "personal"}
    assert set(leader["personal"]) == {"converter.weight", "converter.bias", "weight", "bias"}
    assert leader["personal"]["weight"].shape == (7, 16)
    server = parts["server.h5"]
    assert server["theta"].numel() == leader["previous"].numel()   # the upload: θ only
    assert "algorithm" not in parts["party-a-1.h5"]


def test_the_summary_shows_the_personalised_results_beside_the_generic_ones(shared_runs):
    from fedmpi.analysis.run_log import load_run
    from fedmpi.analysis.summary import summary_table

    run = load_run(shared_runs[RUN] / "log.h5")
    rows = {row[0]: row[1] for row in summary_table([run]).rows}
    final = np.mean(run.personal["tpir_far_1e-2"][-1])
    assert rows["personalised 1:N tpir_far_1e-2 (final, mean over parties)"] == final
    assert rows["personalised 1:1 tar_far_1e-1 (best)"] == np.max(np.mean(run.personal["tar_far_1e-1"], axis=1))
    assert "lfw accuracy (final)" in rows and run.method == "FedFR"
