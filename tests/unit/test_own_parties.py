"""Your own parties: `optim.steps_per_epoch: auto` from the parties' images (configs/my_parties.yaml), the plan
`python -m fedmpi.layout` states, and the files a config names refused by their setting before anything runs."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import yaml

from fedmpi.config import ConfigError, load_config
from fedmpi.config.epochs import plan_line
from fedmpi.party_sizes import party_sizes
from fedmpi.config.files import check_files
from jobs.mpirun import ROOT
from image_files import encode_jpeg


def image_folder(root, identities: int, per_identity: int):
    generator = torch.Generator().manual_seed(0)
    for i in range(identities):
        (root / f"id{i:02d}").mkdir(parents=True)
        for j in range(per_identity):
            face = torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8, generator=generator)
            (root / f"id{i:02d}" / f"{j}.jpg").write_bytes(encode_jpeg(face))
    return root


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """Two rec folders packed by tools.pack_rec from image folders: orgA 8 x 6 images, orgB 5 x 6."""
    base = tmp_path_factory.mktemp("own")
    for name, identities in (("orgA", 8), ("orgB", 5)):
        image_folder(base / "faces" / name, identities, 6)
        out = subprocess.run([sys.executable, "-m", "tools.pack_rec", str(base / "faces" / name),
                              str(base / "data" / name / "train")], capture_output=True, text=True, cwd=ROOT)
        assert out.returncode == 0, out.stderr
    return base


def my_parties(base, **optim) -> list[str]:
    """configs/my_parties.yaml's parties pointed at `base`'s folders."""
    return ["--config", str(ROOT / "configs" / "my_parties.yaml"), f"parties.orgA.data.path={base}/data/orgA",
            f"parties.orgB.data.path={base}/data/orgB", "data.image_size=16",
            *[f"optim.{k}={v}" for k, v in optim.items()]]


def config(argv: list[str]):
    return load_config(argv[1], argv[2:], sizes=party_sizes)


def test_auto_makes_the_longest_party_s_epoch_whole_rounds_of_k(packed):
    cfg = config(my_parties(packed, batch_size=8, epochs=4, milestones="[3]"))
    # orgA: 48 images at 8 a step = 6 steps an epoch (orgB 30 images: 4), rounded up to rounds of fed.K
    assert party_sizes(cfg) == {"orgA": (48, 8), "orgB": (30, 8)}
    K = cfg.fed.K
    assert cfg.optim.steps_per_epoch == -(-6 // K) * K
    assert cfg.rounds == 4 * cfg.optim.steps_per_epoch // K
    assert plan_line(cfg, party_sizes(cfg)).startswith(f"plan: {cfg.rounds} rounds of {K} steps")
    assert f"of the largest party (orgA: 48 images, 8 a step)" in plan_line(cfg, party_sizes(cfg))


def test_auto_counts_synthetic_parties_and_a_number_stays_as_given():
    cfg = load_config(ROOT / "configs" / "demo_cpu.yaml", ["optim.steps_per_epoch=auto"], sizes=party_sizes)
    # vgg: 36 identities x 32 images / (1 rank x 32) = 36 steps, rounded up to K = 15: 45
    assert (cfg.optim.steps_per_epoch, cfg.rounds) == (45, 18)
    assert load_config(ROOT / "configs" / "demo_cpu.yaml").optim.steps_per_epoch == 60
    assert load_config().optim.steps_per_epoch == 12800   # the paper's default is not derived


def test_a_word_other_than_auto_is_refused_and_auto_is_left_to_the_launch():
    with pytest.raises(ConfigError, match=r"^optim.steps_per_epoch: must be a number of steps or auto, got 'al'$"):
        load_config(None, ["optim.steps_per_epoch=al"])
    with pytest.raises(ConfigError, match=r"^optim.steps_per_epoch: auto is counted from the parties' data by the "
                                          r"launch \(python -m fedmpi.run, python -m fedmpi.layout\)"):
        load_config(None, ["optim.steps_per_epoch=auto"])


def test_auto_on_a_missing_folder_names_the_party_s_path(packed, tmp_path):
    argv = my_parties(packed) + [f"parties.orgB.data.path={tmp_path}/orgX"]
    with pytest.raises(ConfigError, match=rf"^parties.orgB.data.path: {tmp_path}/orgX/train.rec not found \("):
        config(argv)


def test_every_file_a_config_names_is_checked_by_its_setting(packed, tmp_path):
    cfg = load_config(ROOT / "configs" / "demo_cpu.yaml", [
        "parties.ga.data.kind=rec", f"parties.ga.data.path={packed}/data/orgA"])
    check_files(cfg)
    cases = {f"parties.vgg.data.kind=folder parties.vgg.data.path={tmp_path}/none":
             f"parties.vgg.data.path: {tmp_path}/none is not a folder",
             f"data.val_kind=bin data.val_path={tmp_path} eval.every=1":
             f"data.val_path: {tmp_path}/lfw.bin not found",
             f"model.init={tmp_path}/m.pth": f"model.init: {tmp_path}/m.pth not found"}
    for overrides, message in cases.items():
        with pytest.raises(ConfigError, match="^" + message):
            check_files(load_config(ROOT / "configs" / "demo_cpu.yaml", overrides.split()))


def test_make_demo_asks_the_layout_for_its_rank_count_alone():
    """`make demo` sizes its mpirun with the layout (its recipe as `make -n` prints it, run as the shell would): the
    count alone, no plan on stderr, which the launch states once itself (tests/mpi/test_run_e2e.py)."""
    import re

    # --no-print-directory: under `make test` this make is a sub-make, which would print "Entering directory" first
    recipe = subprocess.run(["make", "-n", "--no-print-directory", "-o", ".venv/.installed", "-o", "bytecode", "demo"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60).stdout.splitlines()[0]
    query = re.search(r"-n \$\((.*)\) \\$", recipe).group(1)
    out = subprocess.run(["bash", "-c", query], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (out.returncode, out.stdout, out.stderr) == (0, "5\n", "")


def test_layout_prints_each_party_s_images_steps_and_the_rounds(packed):
    argv = my_parties(packed, batch_size=8, epochs=4, milestones="[3]")
    out = subprocess.run([sys.executable, "-m", "fedmpi.layout", *argv], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout)["parties"] == {"orgA": 1, "orgB": 1}   # the JSON scripts read, unchanged
    cfg = config(argv)
    assert out.stderr.splitlines() == ["  orgA: 48 images, 8 a step, 6 steps an epoch",
                                       "  orgB: 30 images, 8 a step, 4 steps an epoch",
                                       plan_line(cfg, party_sizes(cfg))]
