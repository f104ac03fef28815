"""`python -m jobs.reproduce fr-baselines`: the plan (every method, the same seeds, the same overrides but the
method's own, each rule with its defaults; a method or a layout added by one entry), and the committed results
file against the committed logs (docs/results/fr-baselines_cpu.md, docs/results/fr-baselines-cpu/)."""
from __future__ import annotations

import numpy as np
import pytest

from fedmpi.config import load_config
from jobs import frbaselines_study
from jobs.frbaselines_study import LAYOUTS, METHODS, PRETRAIN, SCALES, Method, follow_up, many_spec, study
from jobs.site import ROOT

RESULTS = ROOT / "docs" / "results"


def test_the_cpu_study_runs_every_method_with_the_same_two_seeds_paired():
    runs = {r.name: r for r in study(SCALES["cpu"])[1:]}
    three = [m for m in METHODS if METHODS[m].layout == "3"]
    assert set(runs) == {f"{m}-s{s}" for m in three for s in (0, 1)}
    assert {"fedaws", "fedgc", "privacyface", "fedface", "centralized"} <= set(three)
    own = {name: set(r.overrides) for name, r in runs.items()}
    shared = set.intersection(*own.values())
    for name, run in runs.items():
        method = run.labels["method"]
        assert own[name] - shared == set(METHODS[method].overrides) - shared | {f"run.seed={run.labels['seed']}"}
        cfg = load_config(ROOT / run.config, list(run.overrides))
        assert cfg.fed.K == 4 and cfg.eval.sets.ijbc == "synthetic" and not cfg.log.tensorboard
        if method in ("fedaws", "fedgc", "privacyface"):   # the rule's defaults: nothing tuned
            assert cfg.fed.algorithm == method and not any(o.startswith("fed.options.") for o in run.overrides)
    assert list(runs)[:len(three)] == [f"{m}-s0" for m in three]     # seed by seed: a cut study has pairs


def test_the_pretraining_comes_first_and_its_model_is_trained_as_the_runs_from_it_see_it():
    pretrain = study(SCALES["cpu"])[0]
    assert pretrain.name == PRETRAIN and pretrain.labels["baseline"] == ""
    cfg = load_config(ROOT / pretrain.config, list(pretrain.overrides))
    run = many_spec(SCALES["cpu"], "fedfr", 0, ("init.pth", "init_fc.pt"))
    fr = load_config(ROOT / run.config, list(run.overrides))
    (party,) = cfg.parties
    public = fr.data.public.spec()
    # the same public identities (the synthetic style `public`, the same sizes) and the same backbone and head
    assert (party.data.style, party.data.identities, party.data.images_per_identity) == \
        (public.style, public.identities, public.images_per_identity)
    assert (cfg.model.backbone, cfg.model.width, cfg.model.embedding_size, cfg.data.image_size, cfg.model.head,
            cfg.model.scale, cfg.model.margin) == (fr.model.backbone, fr.model.width, fr.model.embedding_size,
                                                   fr.data.image_size, fr.model.head, fr.model.scale, fr.model.margin)
    assert cfg.checkpoint.every >= 1      # a checkpoint for tools.export


def test_the_many_party_runs_start_from_one_model_with_the_same_rounds_seeds_paired():
    scale, start = SCALES["cpu"], ("folder/start/init.pth", "folder/start/init_fc.pt")
    many = [k for k in METHODS if METHODS[k].layout == "many"]
    assert set(many) == {"fedavg-pre", "fedface-pre", "fedfr", "fedavg-pre-budget"}
    for seed in (0, 1):
        cfgs = {k: load_config(ROOT / many_spec(scale, k, seed, start).config,
                               list(many_spec(scale, k, seed, start).overrides)) for k in many}
        for key, cfg in cfgs.items():
            assert len(cfg.parties) == 12 and cfg.model.init == start[0] and cfg.run.seed == seed
            assert cfg.data.heldout == 4 and cfg.eval.every == 1 and cfg.optim.lr == 0.01
            assert cfg.optim.epochs * cfg.optim.steps_per_epoch // cfg.fed.K == 6, key          # rounds
            assert [p.data.identities for p in cfg.parties] == [40] * 12
            assert many_spec(scale, key, seed, start).labels["baseline"] == "fedavg-pre"
        assert cfgs["fedfr"].model.init_classifier == start[1] and cfgs["fedfr"].data.public.kind == "synthetic"
        assert cfgs["fedface-pre"].fv.enabled and not cfgs["fedavg-pre"].fv.enabled
        assert cfgs["fedavg-pre"].fed.K == cfgs["fedface-pre"].fed.K == 40
        assert (cfgs["fedavg-pre-budget"].fed.K, cfgs["fedavg-pre-budget"].fed.local_momentum) == (95, 0.9)
        assert cfgs["fedavg-pre"].fed.local_momentum == 0.0


def test_the_runs_from_the_start_wait_for_a_completed_pretraining(tmp_path):
    from fedmpi.analysis.sweep_index import write_index

    write_index(tmp_path, {"runs": [{"name": PRETRAIN, "state": "FAILED", "exit_status": 1}]})
    with pytest.raises(ValueError, match=f"the pretraining run {PRETRAIN} did not complete"):
        follow_up(SCALES["cpu"], tmp_path)
    assert follow_up(SCALES["tiny"], tmp_path) == []       # a scale without the layout adds nothing


def test_a_method_in_another_layout_is_one_entry_each(monkeypatch):
    monkeypatch.setitem(LAYOUTS, "12", "f")
    monkeypatch.setitem(METHODS, "fedgc-12", Method(("fed.algorithm=fedgc",), layout="12", label="FedGC, 12"))
    run = next(r for r in study(SCALES["cpu"]) if r.name == "fedgc-12-s1")
    cfg = load_config(ROOT / run.config, list(run.overrides))
    assert len(cfg.parties) == 12 and run.labels == {"method": "fedgc-12", "label": "FedGC, 12", "layout": "12",
                                                     "seed": 1, "baseline": frbaselines_study.BASELINE}


def _md_rows(text: str, heading: str) -> list[list[str]]:
    lines = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines[start + 2:end]]


@pytest.mark.skipif(not (RESULTS / "fr-baselines_cpu.md").is_file(), reason="no committed results")
def test_the_committed_results_file_holds_the_numbers_of_its_logs():
    """Every run's final held-out accuracy (mean of the pair sets) and IJB-C TAR, read here without the report's code."""
    from fedmpi.store.h5log import LogReader

    rows = _md_rows((RESULTS / "fr-baselines_cpu.md").read_text(), "## Every run")
    assert len(rows) == 2 * len(METHODS) + 1        # and the pretraining
    for name, _, seed, accuracy, tar3, tar2, *_ in rows:
        with LogReader(RESULTS / "fr-baselines-cpu" / "runs" / name / "log.h5") as log:
            ev = log.table("eval")
            sets = [k for k in ev if k.endswith("/accuracy")]
            assert len(sets) == 5
            assert accuracy == f"{100 * np.mean([ev[k][-1] for k in sets]):.3f}", name
            if name != PRETRAIN:        # evaluated on the pair sets only
                assert (tar3, tar2) == tuple(f"{100 * ev[f'ijbc/tar_far_{f}'][-1]:.3f}" for f in ("1e-3", "1e-2")), name


@pytest.mark.skipif(not (RESULTS / "fr-baselines_cpu.md").is_file(), reason="no committed results")
def test_the_committed_results_file_is_what_the_report_writes_from_the_committed_logs(tmp_path):
    from committed_reports import generated, rewrite_report

    out = tmp_path / "fr-baselines_cpu.md"
    rewrite_report("fr-baselines", "docs/results/fr-baselines-cpu", out)

    assert generated(out.read_text(), blank_lines=True) == generated((RESULTS / "fr-baselines_cpu.md").read_text(),
                                                                     blank_lines=True)
    assert out.with_name("fr-baselines_cpu_curves.png").is_file()
