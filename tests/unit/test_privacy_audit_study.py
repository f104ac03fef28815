"""The privacy-audit study (jobs/privacy_audit_study.py): every setting's run is a configuration fedmpi accepts at
its rank count (a refused one would end the study after its earlier runs), records the round the audits read, and
the report's table reads each attack's headline numbers from tools.audit's audit.json, a dash where an attack did
not run."""
from pathlib import Path

import pytest

from fedmpi.analysis.privacy_audit_results import cells, table
from fedmpi.config import load_config
from fedmpi.layout import build_layout, check_world_size
from fedmpi.party_sizes import party_sizes
from jobs.privacy_audit_study import SCALES, SETTINGS, run_args


@pytest.mark.parametrize("key", sorted(SETTINGS))
def test_every_setting_is_a_run_fedmpi_accepts_and_records_the_audited_round(key):
    ranks, args = run_args(SETTINGS[key], SCALES["cpu"], Path("/tmp/start.pth"), Path("/tmp/study"), key)
    cfg = load_config(args[1], args[2:], sizes=party_sizes)
    check_world_size(build_layout(cfg), ranks)
    assert 1 in cfg.log.record_received and cfg.model.init == "/tmp/start.pth"
    assert cfg.cross_device == (SETTINGS[key].place == "phone")


def test_the_silo_settings_differ_only_in_what_the_server_is_shown():
    base = set(run_args(SETTINGS["fedavg-silo"], SCALES["cpu"], Path("s"), Path("f"), "x")[1])
    secure = set(run_args(SETTINGS["secagg-3"], SCALES["cpu"], Path("s"), Path("f"), "x")[1])
    assert secure - base == {"fed.secure_aggregation.mode=secagg"} and base - secure == set()


@pytest.mark.parametrize("key", [k for k, s in SETTINGS.items() if s.place == "silo"])
def test_no_two_parties_of_a_silo_setting_hold_the_same_people(key):
    """Parties past the third share a style with an earlier one: they split its identities, so secure aggregation
    over 6 parties sums 6 parties' people, not 3 twice."""
    from fedmpi.data.partition import split_by_identity
    from fedmpi.data.synthetic import identity_keys

    args = run_args(SETTINGS[key], SCALES["cpu"], Path("s"), Path("f"), key)[1]
    cfg = load_config(args[1], args[2:], sizes=party_sizes)
    held = [identity_keys(p.data.style, p.data.identities)[split_by_identity(p.data.identities, p.data.split_count,
                                                                             p.data.split_index)]
            for p in cfg.parties]
    people = [int(key) for keys in held for key in keys]
    assert len(people) == len(set(people)) == len(cfg.parties) * SCALES["cpu"]["party"][0]


def test_the_table_reads_each_attacks_headline_and_dashes_what_did_not_run():
    inversion = {"reconstruction": {"count": 4, "psnr_mean": 12.345}, "identity": {"recovered": 0.75,
                                                                                    "chance": 0.125}}
    row = {"cells": cells({"inversion": inversion, "unknown": {}}), "accuracy": 0.9, "epsilon": None,
           "received": "the sum", "attacked": "aggregate"}
    assert row["cells"] == {"images behind what was attacked": "4", "PSNR (dB)": "12.35",
                            "identity recovered (chance)": "0.750 (0.125)"}
    other = {"cells": {}, "accuracy": None, "epsilon": 2.5, "received": "x", "attacked": "p0"}
    lines = table({"A": row, "B": other})
    assert lines[2] == "| A | the sum | aggregate | 4 | 12.35 | 0.750 (0.125) | 90.00 | — |"
    assert lines[3] == "| B | x | p0 | — | — | — | — | 2.5 |"


def test_the_committed_report_is_what_its_audits_and_logs_say(tmp_path):
    from jobs.privacy_audit_study import main

    folder = Path(__file__).resolve().parents[2] / "docs" / "results" / "privacy-audit-cpu"
    assert main(["--folder", str(folder), "--report-only", str(tmp_path)]) == 0
    assert (tmp_path / "report.md").read_text() == (folder / "report.md").read_text()
    assert "| Positive-only FedAvg, a phone per person, cohort 4 (1) | each upload in the clear | client " in \
        (folder / "report.md").read_text()


def test_a_refused_audit_is_a_row_that_says_why_never_a_number(tmp_path):
    from fedmpi.analysis.privacy_audit_results import REFUSED, read_audit

    run = Path(__file__).resolve().parents[2] / "docs" / "results" / "privacy-audit-cpu" / "runs" / "fedavg-silo"
    (tmp_path / "refused.json").write_text('{"attack": "templates", "refused": "round 1 holds no class rows", '
                                           '"received": "each party\'s θ_k, in the clear"}')
    row = read_audit(run, tmp_path)
    assert row["cells"] == {REFUSED: "round 1 holds no class rows"} and row["pictures"] == []
    assert table({"FedFR": row})[2].startswith("| FedFR | each party's θ_k, in the clear | templates: not applicable "
                                               "| round 1 holds no class rows | ")
