"""A checkpoint resumed on other rank counts continues the same run (under mpirun, the 3-party demo layout
shrunk): party ms1m of 2 ranks x 4 images and of 1 rank x 8 read the same images (the party's stream does not
depend on its rank count) and normalise them in the same BatchNorm groups (model.bn_batch=4), so a run
resumed after round 1 on the other layout ends round 4 equal to the uninterrupted one up to the reduction
order, for PFM + FV (deterministic schedule), FedAvgM, SCAFFOLD and DP-FedAvg (the same noise). float64, so
that the tolerance (max |difference| / max |value| of Θ, and of each logged loss) tells reduction order from a
wrong image (which differs by 1e-2 and more): these tiny networks (BatchNorm over 4 images of 1x1 maps) amplify
float32 rounding by about 100 a round. 1e-9 for the rules without noise (measured: 2e-13 to 7e-11); DP-FedAvg's
noise, 0.17 per value on weights of about 0.1, makes the network amplify the rounding further (measured: up to
1e-9 on the losses after three rounds), so its tolerance is 1e-7. FedFR's too: its objective (CosFace at s = 30,
the personal head's BCE x 10, the contrastive term x 5; 7 local steps a round here) amplifies the rounding of the
other reduction order to 1e-9 after four rounds (measured: 1.0e-9), while one local step on either layout agrees
to 1e-16.

FedGC and PrivacyFace, whose class payloads leave the parties (ms1m's classifier gathered from its shards and
split again, PrivacyFace's received clusters in the leader's trainer state), are among the rules resumed on the
other layout; with FedAwS they are also resumed after round 2 on their own layout, bitwise, and their traffic
columns checked.

Three launches hold every run: 1/1/1 (the uninterrupted runs), 2/1/1 (the uninterrupted runs and the resumes
of the 1/1/1 checkpoints), 1/1/1 (the resumes of the 2/1/1 checkpoints and a resume that changes the party's
batch per step with --allow-config-changes); FedFR from a pretrained start (model.init) is resumed on the other
layouts too, and on its own layout in the third launch (bitwise)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from fedmpi.store.h5log import LogReader
from jobs.mpirun import ROOT, mpi_env
from fedmpi.store.manifest import read_part

SCRIPT = str(ROOT / "tests" / "support" / "mpi_scripts" / "runs_in_one_launch.py")
ROUNDS, K, TOLERANCE = 4, 2, 1e-9
NOISY = 1e-7        # DP-FedAvg's and FedFR's tolerance (the module's text says why)
TWO = [("parties=[{name: ms1m, ranks: 2, data: {style: ms1m, identities: 9, images_per_identity: 4}},"
        " {name: ga, ranks: 1, data: {style: ga, identities: 6, images_per_identity: 4}},"
        " {name: vgg, ranks: 1, data: {style: vgg, identities: 5, images_per_identity: 4}}]")]
ONE = ["parties.ms1m.ranks=1", "parties.ms1m.batch_size=8"]          # party ms1m keeps 8 images a step
COMMON = ["data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=4", "model.width=0.125",
          "model.embedding_size=16", "model.scale=16.0", "optim.batch_size=4", "model.bn_batch=4",
          "optim.epochs=1", f"optim.steps_per_epoch={ROUNDS * K}", "optim.milestones=[]", f"fed.K={K}",
          "eval.every=0", "checkpoint.every=1", f"checkpoint.keep={ROUNDS}", "run.deterministic=true",
          "run.dtype=float64"]
RULES = {
    "pfm-fv": ["fed.algorithm=pfm", "fv.enabled=true", "fv.placement=server", "fv.iterations_per_round=1",
               "fv.T=2", "data.val_sets=[lfw]"],
    "fedavgm": ["fed.algorithm=fedavgm"],
    "scaffold": ["fed.algorithm=scaffold"],
    "dp-fedavg": ["fed.algorithm=fedavg", "fed.dp.enabled=true", "fed.dp.clip=1.0", "fed.dp.noise_multiplier=0.5"],
    # from a pretrained start (the files: `pretrained`), the public set at every party, one local epoch a round
    "fedfr": ["fed.algorithm=fedfr", "model.head=cosface", "model.scale=30", "model.margin=0.4",
              "data.public.kind=synthetic", "data.public.identities=6", "data.public.images_per_identity=4",
              "fed.options.first_epochs=1", "fed.options.min_epochs=1", "fed.options.threshold=0.0"],
    # the class embeddings that travel: FedGC's rows (gathered from ms1m's 2 shards, corrected, split again) and
    # PrivacyFace's clusters (kept by every party as extra negatives); its cones are wide and released from few
    # identities so that these tiny parties release some
    "fedgc": ["fed.algorithm=fedgc"],
    "privacyface": ["fed.algorithm=privacyface", "fed.options.kappa=0.2", "fed.options.min_count=2",
                    "fed.options.clusters=2", "fed.options.candidates=64"],
}
FR_BASELINES = {"fedgc": RULES["fedgc"], "privacyface": RULES["privacyface"],
                "fedaws": ["fed.algorithm=fedaws", "fed.options.mode=fedfr"]}


def _launch(base, world: int, runs: dict[str, list[str]], label: str) -> None:
    from jobs.mpirun import mpirun

    plan = [[*args, f"log.dir={base}", f"log.name={name}", f"data.root={base / 'data'}"]
            for name, args in runs.items()]
    (base / f"{label}.json").write_text(json.dumps(plan))
    out = mpirun(world, [SCRIPT, str(base / f"{label}.json")], timeout=600)
    assert out.returncode == 0, f"{label}\n{out.stdout[-3000:]}{out.stderr[-3000:]}"


def old_format(folder, copy):
    """The checkpoint as fedmpi wrote it before rank counts could change: the signature's topology names each
    party's rank count, the manifest has no batches per step."""
    shutil.copytree(folder, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["party_batches"]
    manifest["signature"]["topology"] = "1 server + ms1m 1 + ga 1 + vgg 1"
    (copy / "manifest.json").write_text(json.dumps(manifest))


def reshard_args(source, out, overrides: list[str]) -> list[str]:
    """tools.reshard's arguments `SOURCE --layout CONFIG OVERRIDES --out OUT` (the config: the defaults)."""
    config = out.parent / f"{out.name}.yaml"
    config.write_text("{}\n")
    return [str(source), "--layout", str(config), *overrides, "--out", str(out)]


def reshard(source, out, overrides: list[str]) -> str:
    """`python -m tools.reshard` (the command, in its own process); its output."""
    done = subprocess.run([sys.executable, "-m", "tools.reshard", *reshard_args(source, out, overrides)],
                          check=False, capture_output=True, text=True, timeout=120, env=mpi_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def in_process(main, argv: list[str], capsys) -> str:
    """A tool's main(argv) in this process (the commands' own processes run in the fixture and in test_export.py:
    each start pays an import of torch); its output."""
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out.strip()


def _from(base, run: str) -> list[str]:
    return ["--resume", str(base / run / "ckpt" / "round_000001")]


def pretrained(base) -> list[str]:
    """FedFR's starting files: a backbone in tools.export's layout (another seed's) and a public classifier."""
    from fedmpi.config import load_config
    from fedmpi.models.backbone import build_backbone
    from tools.export import export_state_dict

    cfg = load_config(None, [*TWO, *COMMON])
    export_state_dict(build_backbone(cfg, torch.device("cpu"), torch.float32, seed=77), base / "init.pth")
    torch.save({"weight": torch.randn(6, 16, generator=torch.Generator().manual_seed(1))}, base / "fc.pt")
    return [f"model.init={base / 'init.pth'}", f"model.init_classifier={base / 'fc.pt'}"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("relayout")
    start = pretrained(base)
    rules = {r: [*a, *start] if r == "fedfr" else a for r, a in RULES.items()}
    _launch(base, 4, {f"one-{r}": [*TWO, *COMMON, *ONE, *a] for r, a in rules.items()}, "one")
    _launch(base, 5, {**{f"two-{r}": [*TWO, *COMMON, *a] for r, a in rules.items()},
                      "two-fedaws": [*TWO, *COMMON, *FR_BASELINES["fedaws"]],
                      **{f"one-two-{r}": [*TWO, *COMMON, *a, *_from(base, f"one-{r}")] for r, a in rules.items()},
                      **{f"again-{r}": [*TWO, *COMMON, *a, "--resume", str(base / f"two-{r}" / "ckpt" / "round_000002")]
                         for r, a in FR_BASELINES.items()}},
            "two")
    old_format(base / "one-fedavgm" / "ckpt" / "round_000001", base / "old-format" / "ckpt" / "round_000001")
    reshard(base / "two-fedavgm" / "ckpt" / "round_000001", base / "offline", [*TWO, *COMMON, *ONE, *RULES["fedavgm"]])
    _launch(base, 4, {**{f"two-one-{r}": [*TWO, *COMMON, *ONE, *a, *_from(base, f"two-{r}")]
                         for r, a in rules.items()},
                      "one-one-fedfr": [*TWO, *COMMON, *ONE, *rules["fedfr"], *_from(base, "one-fedfr")],
                      "offline-resumed": [*TWO, *COMMON, *ONE, *RULES["fedavgm"], "--resume", str(base / "offline")],
                      "old-resumed": [*TWO, *COMMON, *ONE, *RULES["fedavgm"], *_from(base, "old-format")],
                      "batch-changed": [*TWO, *COMMON, "parties.ms1m.ranks=1", *RULES["fedavgm"],
                                        *_from(base, "two-fedavgm"), "--allow-config-changes"]}, "resumed")
    return base


def theta(base, run: str, rounds_done: int = ROUNDS) -> torch.Tensor:
    return read_part(base / run / "ckpt" / f"round_{rounds_done:06d}" / "server.h5")["theta"]


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / a.abs().max())


@pytest.mark.parametrize("rule", list(RULES))
def test_resumed_on_the_other_layout_follows_the_uninterrupted_run(runs, rule):
    tolerance = NOISY if rule in ("dp-fedavg", "fedfr") else TOLERANCE
    assert relative(theta(runs, f"two-{rule}"), theta(runs, f"two-one-{rule}")) < tolerance      # 2/1/1 -> 1/1/1
    assert relative(theta(runs, f"one-{rule}"), theta(runs, f"one-two-{rule}")) < tolerance      # 1/1/1 -> 2/1/1
    with LogReader(runs / f"two-{rule}" / "log.h5") as a, LogReader(runs / f"two-one-{rule}" / "log.h5") as b:
        assert torch.allclose(torch.as_tensor(a.table("rounds")["loss"][1:]),
                              torch.as_tensor(b.table("rounds")["loss"]), rtol=tolerance, atol=0)


def test_the_party_classifier_and_rule_state_are_resplit_and_carried(runs):
    """After the resume the party's classifier is the concatenation of its shards and equals the uninterrupted
    run's; SCAFFOLD's c_i (in the leader's part) and the momentum buffers came across."""
    two = [read_part(runs / "two-scaffold" / "ckpt" / "round_000004" / f"party-ms1m-{k}.h5") for k in range(2)]
    one = read_part(runs / "two-one-scaffold" / "ckpt" / "round_000004" / "party-ms1m-0.h5")
    merged = torch.cat([p["classifier"]["weight"] for p in two])
    assert merged.shape == one["classifier"]["weight"].shape
    assert relative(merged, one["classifier"]["weight"]) < TOLERANCE
    momentum = torch.cat([p["classifier_optimizer"]["state"][0]["momentum_buffer"] for p in two])
    assert relative(momentum, one["classifier_optimizer"]["state"][0]["momentum_buffer"]) < TOLERANCE
    control = [torch.cat([c.reshape(-1) for c in p["algorithm"]["control"]]) for p in (two[0], one)]
    assert relative(*control) < 100 * TOLERANCE      # c_i = (Θ - y) / (K η_l): a difference of models, over 0.2


def test_fedfr_resumed_on_its_own_layout_ends_bitwise_equal_and_on_another_keeps_the_personal_state(runs):
    """The party's state that never leaves it (the previous backbone, the personal head) is in the leader's part:
    resumed on the same rank counts the run ends bit for bit as the uninterrupted one; resumed on other rank counts
    the state came across (the personal head after round 4 follows the uninterrupted run's, up to reduction
    order)."""
    def leader(run):
        return read_part(runs / run / "ckpt" / f"round_{ROUNDS:06d}" / "party-ms1m-0.h5")["algorithm"]

    assert theta(runs, "one-one-fedfr").equal(theta(runs, "one-fedfr"))
    same, resumed = leader("one-fedfr"), leader("one-one-fedfr")
    assert same["previous"].equal(resumed["previous"])
    assert all(same["personal"][k].equal(resumed["personal"][k]) for k in same["personal"])
    two, two_one = leader("two-fedfr"), leader("two-one-fedfr")
    assert relative(two["previous"], two_one["previous"]) < NOISY
    for key in ("converter.weight", "weight", "bias"):
        assert relative(two["personal"][key], two_one["personal"][key]) < NOISY, key
    assert not two["personal"]["converter.weight"].equal(torch.eye(16, dtype=torch.float64))   # it trained


def test_a_changed_batch_per_step_runs_with_allow_config_changes_and_the_log_records_it(runs):
    with LogReader(runs / "batch-changed" / "log.h5") as log:
        changes = json.loads(log.f.attrs["config_changes"])
    assert changes == [{"round": 1, "changes": {"parties.ms1m.images_per_step": ["2 x 4 = 8", "1 x 4 = 4"]}}]


def test_a_checkpoint_resharded_offline_resumes_as_the_online_relayout_does(runs):
    assert theta(runs, "offline-resumed").equal(theta(runs, "two-one-fedavgm"))


def test_an_old_format_checkpoint_resumes_on_its_own_layout_bit_for_bit(runs):
    assert theta(runs, "old-resumed").equal(theta(runs, "one-fedavgm"))


def test_offline_reshard_and_export_write_the_split_and_the_merged_classifier(runs, tmp_path, capsys):
    """`python -m tools.reshard` re-splits party ms1m's 2 shards for 1 rank (and back), bit for bit; `fedmpi-export
    --classifier` writes the concatenation of the shards as one PartialFC state_dict."""
    from tools.export import main as export
    from tools.reshard import main as reshard_main

    source = runs / "two-scaffold" / "ckpt" / "round_000002"
    one, back = tmp_path / "one", tmp_path / "back"
    overrides = [*TWO, *COMMON, *RULES["scaffold"]]
    assert in_process(reshard_main, reshard_args(source, one, [*overrides, *ONE]), capsys) == \
        f"{one}: ms1m 2 -> 1 ranks; resume with --resume {one}"
    assert in_process(reshard_main, reshard_args(one, back, overrides), capsys) == \
        f"{back}: ms1m 1 -> 2 ranks; resume with --resume {back}"
    shards = [read_part(source / f"party-ms1m-{k}.h5") for k in range(2)]
    merged = read_part(one / "party-ms1m-0.h5")
    assert merged["classifier"]["weight"].equal(torch.cat([p["classifier"]["weight"] for p in shards]))
    assert merged["algorithm"]["control"][0].equal(shards[0]["algorithm"]["control"][0])
    for k in range(2):
        again = read_part(back / f"party-ms1m-{k}.h5")
        assert again["classifier"]["weight"].equal(shards[k]["classifier"]["weight"])
        assert again["classifier_optimizer"]["state"][0]["momentum_buffer"].equal(
            shards[k]["classifier_optimizer"]["state"][0]["momentum_buffer"])
    printed = in_process(export, [str(source), "--out", str(tmp_path / "m.pth"), "--classifier", "ms1m"], capsys)
    assert "ms1m_fc.pt: party ms1m's classifier, 9 classes x 16, merged from 2 shards" in printed
    exported = torch.load(tmp_path / "ms1m_fc.pt", weights_only=True)
    assert list(exported) == ["weight"]
    assert exported["weight"].equal(torch.cat([p["classifier"]["weight"] for p in shards]).float())


def _parts(base, run: str, rounds_done: int = ROUNDS) -> dict:
    folder = base / run / "ckpt" / f"round_{rounds_done:06d}"
    return {path.name: read_part(path) for path in sorted(folder.glob("*.h5"))}


def _equal_trees(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for key in a:
            if key not in ("_attrs", "wall_time", "rng", "config"):    # config: its log.name
                _equal_trees(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _equal_trees(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.equal(b), where
    else:
        assert a == b, where


@pytest.mark.parametrize("rule", list(FR_BASELINES))
def test_the_fr_baselines_resume_bitwise_on_the_sharded_layout(runs, rule):
    """2/1/1 (ms1m's classifier sharded over 2 ranks), resumed after round 2: every part of the round-4 checkpoint
    (Θ, the classifier shards and their momentum, PrivacyFace's received clusters and its count of releases) and
    the log's `classes` rows equal the uninterrupted run's."""
    whole, again = _parts(runs, f"two-{rule}"), _parts(runs, f"again-{rule}")
    assert set(whole) == set(again) == {"server.h5", "party-ms1m-0.h5", "party-ms1m-1.h5", "party-ga-0.h5",
                                        "party-vgg-0.h5"}
    for name in whole:
        _equal_trees(whole[name], again[name], f"{rule} {name}")
    with LogReader(runs / f"two-{rule}" / "log.h5") as a, LogReader(runs / f"again-{rule}" / "log.h5") as b:
        first, second = a.table("classes"), b.table("classes")
        assert list(first["round"]) == [0, 1, 2, 3] and list(second["round"]) == [2, 3]
        for column in first:
            assert np.array_equal(first[column][2:], second[column]), column


def test_what_leaves_a_party_is_recorded_and_counted(runs):
    """The log says what crosses; the traffic columns add the class payloads to the backbones' bytes: FedGC's
    20 rows x 16 values each way and ms1m's 4 rows of its second shard gathered and split again; PrivacyFace's
    2 clusters x 18 values up per party, the other parties' 4 down, and ms1m's gather and broadcast."""
    def rounds(run):
        with LogReader(runs / run / "log.h5") as log:
            return log.table("rounds"), log.f.attrs["leaves_party"]

    base, leaves = rounds("two-fedavgm")
    assert leaves == "backbone"
    item = 8
    for run, up, down, intra, says in [
            ("two-fedgc", 20 * 16, 20 * 16, 2 * 4 * 16, "backbone, class embeddings"),
            ("two-fedaws", 20 * 16, 20 * 16, 2 * 4 * 16, "backbone, class embeddings"),
            ("two-privacyface", 3 * 2 * 18, 3 * 4 * 18, 4 * 16 + 4 * 18,
             "backbone, differentially private clusters of the class embeddings")]:
        table, leaves = rounds(run)
        assert leaves == says
        assert list(table["bytes_up"] - base["bytes_up"]) == [up * item] * ROUNDS, run
        assert list(table["bytes_down"] - base["bytes_down"]) == [down * item] * ROUNDS, run
        assert list(table["bytes_intra"] - base["bytes_intra"]) == [intra * item] * ROUNDS, run
        assert list(table["bytes_moved"]) == list(table["bytes_up"] + table["bytes_down"] + table["bytes_intra"])


def test_privacyface_logs_its_privacy_and_its_parties_keep_the_others_clusters(runs):
    with LogReader(runs / "two-privacyface" / "log.h5") as log:
        classes = log.table("classes")
    assert list(classes["releases"]) == [1, 2, 3, 4]
    assert np.allclose(classes["epsilon"], [1.4, 2.8, 4.2, 5.6]) and np.allclose(classes["delta"], [2e-5 * r for r in (1, 2, 3, 4)])
    assert classes["released"].sum() > 0
    parts = _parts(runs, "two-privacyface")
    assert int(parts["server.h5"]["algorithm"]["releases"]) == ROUNDS
    received = parts["party-ms1m-0.h5"]["algorithm"]["received"]
    assert received.shape == (4, 18) and set(received[:, -1].tolist()) <= {0.0, 1.0}
    assert "algorithm" not in parts["party-ms1m-1.h5"]          # written once, by the party's leader
