"""The config schema: the paper's defaults, overrides, and refusals that name the key path; numbers as Python and
YAML 1.2 read them (1e-3, -1e6, 1.0e30, 5e+2, .5) in every float field, from overrides and files alike."""
import dataclasses
import subprocess
import sys
import time
import types
import typing
from decimal import Decimal

import pytest
import yaml

from fedmpi.aggregation.registry import AGGREGATORS
from fedmpi.algorithms.registry import RULES
from fedmpi.config import Config, ConfigError, PartyConfig, config_from_yaml, load_config, to_yaml
from fedmpi.listed import listed_class
from fedmpi.core.build import server_optimizer_name
from fedmpi.layout import build_layout
from jobs.mpirun import ROOT, mpirun


def test_defaults_are_the_papers():
    cfg = load_config()
    assert (cfg.optim.batch_size, cfg.optim.lr, cfg.optim.momentum, cfg.optim.weight_decay) == (64, 0.1, 0.9, 5e-4)
    assert (cfg.optim.epochs, cfg.optim.steps_per_epoch, cfg.optim.milestones) == (26, 12800, [10, 18, 24])
    assert (cfg.model.head, cfg.model.scale, cfg.margin) == ("arcface", 64.0, 0.5)
    assert load_config(overrides=["model.head=cosface"]).margin == 0.35
    assert [(p.name, p.ranks) for p in cfg.parties] == [("ms1m", 8), ("ga", 4), ("vgg", 4)]
    assert build_layout(cfg).world_size == 17
    assert (cfg.fv.T, cfg.fv.phi, cfg.fv.gamma, cfg.fv.eps, cfg.fv.norm) == (3, 0.01, 0.01, 0.001, "local")


def test_lr_schedule_decays_at_epoch_ends():
    cfg = load_config(overrides=["fed.K=1600"])
    assert cfg.rounds == 26 * 12800 // 1600
    per_epoch = 12800 // 1600
    assert cfg.lr_at_round(10 * per_epoch - 1) == pytest.approx(0.1)
    assert cfg.lr_at_round(10 * per_epoch) == pytest.approx(0.01)
    assert cfg.lr_at_round(18 * per_epoch) == pytest.approx(0.001)
    assert cfg.lr_at_round(24 * per_epoch) == pytest.approx(0.0001)


def test_dotted_overrides_and_party_by_name():
    cfg = load_config(overrides=["fed.K=400", "model.backbone=ir34", "parties.ga.ranks=2", "fv.enabled=true"])
    assert (cfg.fed.K, cfg.model.backbone, cfg.parties[1].ranks, cfg.fv.enabled) == (400, "ir34", 2, True)


def test_paper_configs_load():
    for name, world in (("fedface_3party", 17), ("fedface_12party", 17), ("demo_cpu", 5)):
        for K in (100, 400, 1600):
            cfg = load_config(ROOT / "configs" / f"{name}.yaml", [f"fed.K={K}"] if name != "demo_cpu" else [])
            assert build_layout(cfg).world_size == world
    twelve = load_config(ROOT / "configs" / "fedface_12party.yaml")
    assert [p.ranks for p in twelve.parties] == [2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1]
    assert {p.data.split_count for p in twelve.parties} == {4}


@pytest.mark.parametrize("overrides, message", [
    (["fed.K=0"], "fed.K: must be > 0"),
    (["fed.K=-3"], "fed.K: must be > 0"),
    (["fed.K=300"], "fed.K: epochs x steps_per_epoch = 332800 is not a whole number of rounds"),
    (["optim.steps_per_epoch=100", "fed.K=40", "optim.epochs=2", "optim.milestones=[1]"],
     "optim.milestones[0]: epoch 1 ends at step 100, not on a round boundary"),
    (["parties.ga.ranks=0"], "parties.ga.ranks: must be > 0"),
    (["parties.ga.data.identities=0"], "parties.ga.data.identities: an empty party"),
    (["model.lr=1"], "model.lr: unknown key"),
    (["nonsense.key=1"], "nonsense: unknown key"),
    (["fed.K=abc"], "fed.K: expected an integer, got 'abc'"),
    (["fv.enabled=maybe"], "fv.enabled: expected true/false"),
    (["model.backbone=ir200"], "model.backbone: 'ir200' is not one of ir18, ir34, ir50, ir100"),
    (["parties.nobody.ranks=2"], "parties.nobody: no party named 'nobody'"),
    (["fed.algorithm=solo", "fed.solo_party=xyz"], "fed.solo_party: 'xyz' is not a party"),
    (["fed.K"], "fed.K: an override must look like key.path=value"),
    (["data.image_size=100"], "data.image_size: must be a multiple of 16"),
    (["fed.algorithm=fedsgdx"], "fed.algorithm: unknown algorithm 'fedsgdx' (known: fedavg, fedavgm, pfm"),
    (["fed.options.mu=0.1"], "fed.options.mu: unknown key"),
    (["fed.algorithm=fedavgm", "fed.server.optimizer=adam"],
     "fed.server.optimizer: fedavgm is defined by the momentum server optimizer; for fedavg with the adam server optimizer use"),
    (["fed.server.optimizer=rmsprop"], "fed.server.optimizer: 'rmsprop' is not one of auto, sgd, momentum"),
    (["fed.server.lr=0"], "fed.server.lr: must be > 0"),
    (["fed.setting=centralized", "fv.enabled=true"], "fv.enabled: FV searches weightings over parties"),
    (["fed.setting=federated", "fed.solo_party=ga"], "fed.solo_party: only used with fed.setting=solo"),
    (["eval.every=-1"], "eval.every: must be >= 0 (0: no evaluation)"),
    (["eval.every=0", "eval.sets.ijbc=synthetic"],
     "eval.sets.ijbc: is evaluated with the held-out evaluation; eval.every=0 means no evaluation"),
])
def test_bad_values_are_refused_with_the_key_path(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_key_in_a_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"optim": {"learning_rate": 0.1}}))
    with pytest.raises(ConfigError, match=r"optim.learning_rate: unknown key"):
        load_config(bad)
    party = tmp_path / "party.yaml"
    party.write_text(yaml.safe_dump({"parties": [{"name": "a", "ranks": 1, "data": {"kind": "tape"}}]}))
    with pytest.raises(ConfigError, match=r"parties.a.data.kind: 'tape' is not one of"):
        load_config(party)
    with pytest.raises(ConfigError, match=r"--config: no such file"):
        load_config(tmp_path / "missing.yaml")


def test_print_config_shows_the_resolved_config():
    out = subprocess.run([sys.executable, "-m", "fedmpi.run", "--print-config", "fed.K=400"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    resolved = yaml.safe_load(out.stdout)
    assert resolved["fed"]["K"] == 400 and resolved["optim"]["milestones"] == [10, 18, 24]


def test_world_size_mismatch_under_mpirun_names_the_layout():
    start = time.monotonic()
    out = mpirun(3, ["-m", "fedmpi.run"], timeout=120)
    assert out.returncode != 0
    assert ("this layout needs 17 MPI ranks (1 server + ms1m 8 + ga 4 + vgg 4), but the job has 3"
            in out.stderr)
    assert time.monotonic() - start < 60


def test_settings_combine_with_any_rule_and_old_configs_keep_their_meaning():
    central = load_config(None, ["fed.setting=centralized", "fed.algorithm=pfm"])
    assert [p.name for p in build_layout(central).parties] == ["centralized"]
    legacy = load_config(None, ["fed.algorithm=centralized", "optim.momentum=0.5"])
    assert (legacy.fed.setting, legacy.fed.algorithm, legacy.fed.local_momentum) == ("centralized", "fedavg", 0.5)
    solo = load_config(None, ["fed.algorithm=solo", "fed.solo_party=ga"])
    assert [p.name for p in build_layout(solo).parties] == ["ga"] and solo.fed.algorithm == "fedavg"
    old_fedavgm = load_config(None, ["fed.algorithm=fedavgm", "fed.server_momentum=0.5", "fed.server_lr=2",
                                     "fed.nesterov=false"])
    s = old_fedavgm.fed.server
    assert (s.momentum, s.lr, s.nesterov, server_optimizer_name(old_fedavgm)) == (0.5, 2.0, False, "momentum")
    again = config_from_yaml(to_yaml(old_fedavgm))  # the resolved config a log stores reads back the same
    assert again.fed == old_fedavgm.fed


def test_benchmark_sets_load_with_an_evaluation_schedule():
    cfg = load_config(overrides=["eval.every=5", "eval.sets.megaface=/data/megaface"])
    assert (cfg.eval.sets.ijbb, cfg.eval.sets.ijbc, cfg.eval.sets.megaface) == ("", "", "/data/megaface")


def test_each_rule_runs_its_papers_local_optimizer_unless_the_config_names_one():
    from fedmpi.algorithms.registry import RULES

    momentum = {rule: load_config(None, [f"fed.algorithm={rule}"]).fed.local_momentum for rule in RULES}
    assert momentum == {"fedavg": 0.0, "fedavgm": 0.0, "pfm": None, "fedprox": 0.0, "scaffold": 0.0,
                        "fedadam": 0.0, "fedyogi": 0.0, "fedadagrad": 0.0, "mime_lite": None,   # None: not read
                        "feddyn": 0.0, "fedaws": 0.0, "fedgc": 0.0, "privacyface": 0.0,
                        "fedfr": 0.9}
    assert load_config(None, ["fed.algorithm=scaffold", "fed.local_momentum=0.9"]).fed.local_momentum == 0.9
    assert load_config(None, ["fed.setting=centralized", "optim.momentum=0.8"]).fed.local_momentum == 0.8
    shown = subprocess.run([sys.executable, "-m", "fedmpi.run", "--print-config", "fed.algorithm=scaffold"],
                           capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert shown.returncode == 0 and "  local_momentum: 0.0\n" in shown.stdout


def test_a_resume_ignores_a_key_its_rule_does_not_read(tmp_path):
    """A checkpoint of a run that left fed.local_momentum at the earlier default 0.9: PFM does not read it, so
    resuming with today's default (None) changes nothing; SCAFFOLD does, so the change is named."""
    import h5py

    from fedmpi.store.resume import config_changes

    for rule, expected in (("pfm", {}), ("scaffold", {"fed.local_momentum": [0.9, 0.0]})):
        saved = load_config(None, [f"fed.algorithm={rule}", "fed.local_momentum=0.9"])
        folder = tmp_path / rule
        folder.mkdir()
        with h5py.File(folder / "server.h5", "w") as f:
            f.create_dataset("config", data=to_yaml(saved))
        assert config_changes(folder, load_config(None, [f"fed.algorithm={rule}"])) == expected


def test_a_resume_takes_a_setting_its_checkpoint_predates_at_its_default(tmp_path):
    """A checkpoint written before fed.upload_check existed resumes without --allow-config-changes; one that set it
    otherwise than now names the change."""
    import h5py

    from fedmpi.store.resume import config_changes

    older = yaml.safe_load(to_yaml(load_config()))
    del older["fed"]["upload_check"]
    (tmp_path / "old").mkdir()
    with h5py.File(tmp_path / "old" / "server.h5", "w") as f:
        f.create_dataset("config", data=yaml.safe_dump(older))
    assert config_changes(tmp_path / "old", load_config()) == {}
    assert config_changes(tmp_path / "old", load_config(None, ["fed.upload_check.action=warn"])) == {
        "fed.upload_check.action": ["exclude", "warn"]}


# ---------------------------------------------------------------- numbers are numbers


def float_fields(cls, prefix: str = ""):
    """(dotted path, default) of every float field of the dataclass `cls` and the dataclasses it holds."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        if dataclasses.is_dataclass(tp):
            yield from float_fields(tp, f"{prefix}{f.name}.")
        elif tp is float:
            yield f"{prefix}{f.name}", (f.default if f.default is not dataclasses.MISSING else f.default_factory())


def every_float_setting():
    """(path, value, what else the setting needs, YAML file text): every float field of the config, the parties'
    and the rules' and aggregators' options, each with a valid value (its default; 0.25 where it is empty)."""
    cases = [(path, value, [], None) for path, value in float_fields(Config)]
    cases += [(f"parties.ga.{path}", value, [], ("parties:\n  - name: ga\n" + nested(path, "{}", 4)))
              for path, value in float_fields(PartyConfig)]
    for name, where in RULES.items():
        options = listed_class(where, name).Options
        cases += [(f"fed.options.{path}", value, [f"fed.algorithm={name}"], None)
                  for path, value in (float_fields(options) if dataclasses.is_dataclass(options) else ())]
    for name, where in AGGREGATORS.items():
        cases += [(f"fed.aggregation.{path}", value, [f"fed.aggregation.rule={name}", "fv.enabled=false"], None)
                  for path, value in float_fields(listed_class(where, name).Options)]
    assert len(cases) >= 30
    return [pytest.param(path, 0.25 if value is None else value, extra, text, id=path)
            for path, value, extra, text in cases]


def nested(path: str, value: str, indent: int = 0) -> str:
    """`a.b.c` as nested YAML mappings ending in `c: value`."""
    *outer, last = path.split(".")
    lines = [f"{'  ' * i}{key}:" for i, key in enumerate(outer)] + [f"{'  ' * len(outer)}{last}: {value}"]
    return "".join(" " * indent + line + "\n" for line in lines)


def exponent_form(value: float) -> str:
    """The number written with an exponent and no dot (0.1 -> 1e-1, 600.0 -> 6e2), which YAML 1.1 reads as text."""
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    return f"{'-' if sign else ''}{''.join(map(str, digits))}e{exponent}"


def value_at(cfg, path: str):
    node = cfg
    for key in path.split("."):
        node = (next(p for p in node if p.name == key) if isinstance(node, list) else
                node[key] if isinstance(node, dict) else getattr(node, key))
    return node


@pytest.mark.parametrize("path, value, extra, text", every_float_setting())
def test_every_float_setting_reads_an_exponent_without_a_dot_from_an_override_and_a_file(path, value, extra, text,
                                                                                         tmp_path):
    form = exponent_form(value)
    assert float(form) == value and "." not in form
    assert value_at(load_config(overrides=[*extra, f"{path}={form}"]), path) == value
    file = tmp_path / "config.yaml"
    file.write_text(text.format(form) if text else nested(path, form))
    assert value_at(load_config(file, extra), path) == value


def test_the_papers_number_forms_through_print_config_and_a_file(tmp_path):
    forms = ["optim.lr=1e-3", "fed.dp.delta=1e-5", "parties.ga.attack.scale=-1e6", "fed.server.lr=1.0e30",
             "fed.upload_check.norm_ratio=5e+2", "fv.gamma=.5", "run.seed=1e3", "fv.enabled=on", "fed.upload_check.action=off"]
    out = subprocess.run([sys.executable, "-m", "fedmpi.run", "--print-config", *forms], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    shown = yaml.safe_load(out.stdout)
    assert (shown["optim"]["lr"], shown["fed"]["dp"]["delta"], shown["parties"][1]["attack"]["scale"],
            shown["fed"]["server"]["lr"], shown["fed"]["upload_check"]["norm_ratio"], shown["fv"]["gamma"]) == (1e-3, 1e-5, -1e6, 1e30, 500, 0.5)
    assert (shown["run"]["seed"], shown["fv"]["enabled"], shown["fed"]["upload_check"]["action"]) == (1000, True, "off")
    file = tmp_path / "grid.yaml"
    file.write_text("optim:\n  lr: 1e-3\n  weight_decay: 5e-4\nfed:\n  dp: {delta: 1e-5}\n  upload_check: {action: off}\n")
    cfg = load_config(file)
    assert (cfg.optim.lr, cfg.optim.weight_decay, cfg.fed.dp.delta, cfg.fed.upload_check.action) == (
        1e-3, 5e-4, 1e-5, "off")
    with pytest.raises(ConfigError, match=r"^run.seed: expected an integer, got 1.5$"):
        load_config(overrides=["run.seed=1.5e0"])         # an integer setting refuses only a number that is not one
