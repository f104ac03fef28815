"""The FedFace paper's claims (Sec. 4.3-4.4) checked against a study's tables, and the seed-to-seed spread that
says which differences are noise. Used by fedmpi/analysis/fedface_report.py; every figure comes from the analysis tools'
results (fedmpi.analysis.table1, fedmpi.analysis.relative, fedmpi.analysis.weights), none is recomputed from the logs here."""
from __future__ import annotations

import math

import numpy as np

from fedmpi.analysis.methods import fedface_label
from fedmpi.analysis.relative import BASELINE, relative_results
from fedmpi.analysis.run_log import AnalysisError
from fedmpi.analysis.table1 import table1
from fedmpi.analysis.tables import Table, fixed, nan_mean
from fedmpi.analysis.weights import weight_trace

SEED_NOTE = "mean of the seeds ± half their range"
# the methods the claims compare, labelled as the analysis tools label their runs
CENTRALIZED, FEDAVG, FEDAVG_FV, PFM, FEDFACE = (fedface_label(key) for key in
                                               ("centralized", "fedavg", "fedavg+fv", "pfm", "fedface"))


def seed_spread_tables(t1_runs, f4_runs, methods: list[str], factor: float):
    """(Table 1 per seed, Fig. 4 per seed, Fig. 4 results per seed). Runs are labelled 'SETTING seed N': Table 1
    from t1_runs (one setting), Fig. 4 from f4_runs, each method relative to its own seed's centralized run."""
    empty = Table(header=["-"], rows=[], footnotes=["no seed runs"])
    spread_t1 = empty
    if t1_runs:
        t1 = table1(t1_runs, factor, methods=methods)
        columns = t1.header[2:]
        by_party: dict[str, dict[str, list[float]]] = {}
        for group, party, *values in t1.rows:
            for method, value in zip(columns, values):
                by_party.setdefault(party, {}).setdefault(method, []).append(value)
        rows = [[party, *[mean_half_range(by_party[party].get(m, [])) for m in columns]] for party in by_party]
        spread_t1 = Table(header=["Party", *columns], rows=rows, footnotes=[SEED_NOTE + "."])
    if not f4_runs:
        return spread_t1, empty, []
    try:
        results = relative_results(f4_runs, "accuracy")
    except AnalysisError as exc:
        return spread_t1, Table(header=["-"], rows=[], footnotes=[str(exc)]), []
    sets = list(dict.fromkeys(s for e in results for s in e["sets"]))
    rows = []
    for setting, method in dict.fromkeys((base_setting(e), e["method"]) for e in results):
        entries = [e for e in results if base_setting(e) == setting and e["method"] == method]
        per_set = [[dict(zip(e["sets"], e["values"])).get(s, math.nan) for e in entries] for s in sets]
        rows.append([setting, method, len(entries), *[mean_half_range(v) for v in per_set],
                     mean_half_range([nan_mean(v) for v in zip(*per_set)])])
    spread_f4 = Table(header=["Setting", "Method", "seeds", *sets, "mean"], rows=rows,
                      footnotes=[SEED_NOTE + "; percentage points minus that seed's centralized run."])
    return spread_t1, spread_f4, results


def seed_label(setting: str, seed) -> str:
    """The setting label of one seed's runs, 'c seed 1' (what `split_seed_label` reads back)."""
    return f"{setting} seed {seed}"


def split_seed_label(label: str) -> tuple[str, str]:
    """('c', '1') of 'c seed 1'."""
    setting, seed = label.split(" seed ")
    return setting, seed


def base_setting(entry: dict) -> str:
    """'c' of a per-seed entry's setting 'c seed 1'."""
    return split_seed_label(entry["setting"])[0]


def mean_half_range(values: list[float]) -> str:
    """'mean ± half range' of the values that are numbers (one value alone, '-' for none)."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    if len(values) == 1:
        return fixed(values[0], 2)
    return f"{fixed(np.mean(values), 2)} ± {fixed((max(values) - min(values)) / 2, 2)}"


def _mean(results, setting: str, method: str) -> float:
    return next((nan_mean(e["values"]) for e in results if e["setting"] == setting and e["method"] == method),
                math.nan)


def per_seed(results_seeds, setting: str, method: str) -> dict[str, float]:
    """{'seed N': the method's mean relative result in that seed} for a setting run with several seeds."""
    return {split_seed_label(e["setting"])[1]: nan_mean(e["values"]) for e in results_seeds
            if base_setting(e) == setting and e["method"] == method}


def paired_gaps(results_seeds, better: tuple[str, str], worse: tuple[str, str]) -> list[float]:
    """(setting, method) `better` minus `worse` seed by seed (the same seed's data order and initialisation,
    the centralized baseline cancelling), for the seeds both were run with."""
    a, b = per_seed(results_seeds, *better), per_seed(results_seeds, *worse)
    if better[1] == BASELINE:       # the baseline is 0 in every seed it is compared in
        a = {s: 0.0 for s in b}
    return [a[s] - b[s] for s in sorted(a.keys() & b.keys()) if not math.isnan(a[s] - b[s])]


def seed_noise(results_seeds) -> float:
    """The largest seed-to-seed difference of a method's mean (over sets) relative result, in points."""
    gaps = []
    for setting, method in {(base_setting(e), e["method"]) for e in results_seeds}:
        means = list(per_seed(results_seeds, setting, method).values())
        if len(means) > 1:
            gaps.append(max(means) - min(means))
    return max(gaps) if gaps else math.nan


def paired_verdict(gaps: list[float]) -> str:
    """Whether `better` beat `worse` in every seed: a difference that keeps its sign over the seeds (paired on
    the seed) is what two or three seeds can tell from chance."""
    if all(g > 0 for g in gaps):
        return f"yes, in all {len(gaps)} seeds"
    if all(g < 0 for g in gaps):
        return f"no, in all {len(gaps)} seeds"
    return "within seed noise (the sign changes between seeds)"


def measured(gap: float, gaps: list[float]) -> str:
    return f"{gap:+.2f}" + (f" (per seed {', '.join(f'{g:+.2f}' for g in gaps)})" if len(gaps) > 1 else "")


def verdict(holds: bool, margin: float, noise: float) -> str:
    if math.isnan(margin):
        return "not measured"
    within = not math.isnan(noise) and abs(margin) <= noise
    return ("yes" if holds else "no") + (" (within seed noise)" if within else "")


def claims_table(t1, results, results_seeds, norms, fig6_runs, bad_runs) -> Table:
    noise = seed_noise(results_seeds)
    seeded = sorted({base_setting(e) for e in results_seeds})
    rows = [["Seed-to-seed spread of a method's mean relative result", "/".join(seeded) or "-",
             f"{noise:.2f} points", "reference"]]
    rows += _table1_claims(t1)

    def compare(claim: str, setting: str, gap: float, better: tuple[str, str], worse: tuple[str, str]) -> None:
        gaps = paired_gaps(results_seeds, better, worse) if {better[0], worse[0]} <= set(seeded) else []
        rows.append([claim, setting, measured(gap, gaps),
                     paired_verdict(gaps) if len(gaps) > 1 else verdict(gap > 0, gap, noise)])

    settings = list(dict.fromkeys(e["setting"] for e in results))
    k_settings = [s for s in ("a", "b", "c") if s in settings]
    for s in settings:
        fedavg = _mean(results, s, FEDAVG)
        if (s in k_settings or s == "f") and not math.isnan(fedavg):
            compare("(1) Centralized above FedAvg (points of centralized minus FedAvg)", s, -fedavg,
                    (s, BASELINE), (s, FEDAVG))
    if len(k_settings) > 1:
        means = [_mean(results, s, FEDAVG) for s in k_settings]
        worse = all(a > b for a, b in zip(means, means[1:]))
        rows.append(["(1) FedAvg degrades as K grows", "/".join(k_settings), " > ".join(f"{m:+.2f}" for m in means),
                     verdict(worse, min(abs(a - b) for a, b in zip(means, means[1:])), noise)])
        first, last = k_settings[0], k_settings[-1]
        if first in seeded and last in seeded:
            compare(f"(1) FedAvg at K of ({first}) above FedAvg at K of ({last})", f"{first}/{last}",
                    _mean(results, first, FEDAVG) - _mean(results, last, FEDAVG), (first, FEDAVG),
                    (last, FEDAVG))
    for s in settings:
        for claim, better, worse in (("(2) FedAvg+FV above FedAvg", FEDAVG_FV, FEDAVG),
                                     ("(3) PFM above FedAvg", PFM, FEDAVG),
                                     ("FedFace (PFM+FV) above FedAvg", FEDFACE, FEDAVG)):
            gap = _mean(results, s, better) - _mean(results, s, worse)
            if not math.isnan(gap):
                compare(claim, s, gap, (s, better), (s, worse))
        entry = next((e for e in results if e["setting"] == s and e["method"] == FEDFACE), None)
        if entry:
            above = sum(v > 0 for v in entry["values"])
            rows.append(["(4) FedFace above centralized on most benchmarks", s,
                         f"{above} of {len(entry['values'])} sets, mean {nan_mean(entry['values']):+.2f}",
                         verdict(above > len(entry["values"]) / 2, nan_mean(entry["values"]), noise)])
        pfm = _mean(results, s, PFM)
        if s in ("d", "e", "f") and not math.isnan(pfm):
            rows.append(["PFM comparable to centralized", s, f"{pfm:+.2f}",
                         "yes" if math.isnan(noise) or abs(pfm) <= noise else "no"])
    for method in dict.fromkeys(e["method"] for e in norms):
        by_norm = {e["norm"]: nan_mean(e["values"]) for e in norms if e["method"] == method}
        if {"local", "moving"} <= set(by_norm):
            gap = by_norm["local"] - by_norm["moving"]
            rows.append(["Fig. 5: Local Norm at least as good as Moving Norm", method,
                         f"{by_norm['local']:.2f} vs {by_norm['moving']:.2f} %", verdict(gap >= 0, gap, noise)])
    rows += _weight_claims(fig6_runs, bad_runs)
    return Table(header=["Claim (paper)", "Setting", "Measured", "Holds here?"], rows=rows,
                 footnotes=["Relative results in percentage points of held-out accuracy, mean over the validation "
                            "sets, averaged over the seeds where a setting ran with several. In a setting run with "
                            "several seeds a comparison is paired on the seed (the same initialisation and data "
                            "order, each seed's own centralized run) and holds when it holds in every seed; "
                            "elsewhere 'within seed noise' means the difference is no larger than the largest "
                            "seed-to-seed spread above."])


def _table1_claims(t1) -> list[list]:
    if t1 is None:
        return []
    columns = t1.header[2:]
    rows = []
    for group in dict.fromkeys(r[0] for r in t1.rows):
        cells = {r[1]: dict(zip(columns, r[2:])) for r in t1.rows if r[0] == group}
        parties = [p for p, c in cells.items() if not math.isnan(c.get(PFM, math.nan))
                   and not math.isnan(c.get(FEDAVG, math.nan))]
        lower = [p for p in parties if cells[p][PFM] < cells[p][FEDAVG]]
        if parties:
            rows.append(["Table 1 (3): PFM's loss below FedAvg's", group,
                         ", ".join(f"{p} {cells[p][PFM]:.2f} vs {cells[p][FEDAVG]:.2f}" for p in parties),
                         "yes" if len(lower) == len(parties) else f"{len(lower)} of {len(parties)} parties"])
        union = next((c.get(CENTRALIZED) for p, c in cells.items() if not math.isnan(c.get(CENTRALIZED, math.nan))),
                     math.nan)
        fedavg = nan_mean([cells[p][FEDAVG] for p in parties])
        if not math.isnan(union) and not math.isnan(fedavg):
            rows.append(["Table 1 (2): FedAvg's loss above centralized's", group,
                         f"party mean {fedavg:.2f} vs union {union:.2f}", "yes" if fedavg > union else "no"])
    return rows


def _weight_claims(fig6_runs, bad_runs) -> list[list]:
    rows = []
    for run in fig6_runs:
        if run.cfg("parties") and any(p.get("data", {}).get("shuffle_labels") for p in run.cfg("parties")):
            continue
        steps, w = weight_trace(run)
        if len(steps) < 2:
            continue
        uniform = 1 / len(run.parties)
        early = w[: max(2, len(w) // 2)].mean(axis=0)
        top = run.parties[int(np.argmax(early))]
        far = np.abs(w - uniform).max(axis=1)
        rows.append(["Fig. 6: MS1M parties weighted most early", run.label, f"{top}: mean w {early.max():.3f} over the "
                     f"first half", "yes" if top.startswith("ms1m") else "no"])
        first_half = far[: max(2, len(far) // 2)].max()
        rows.append(["Fig. 6: weights tend to uniform as training converges", run.label,
                     f"max |w - 1/P| {far[-1]:.3f} at the end, {first_half:.3f} at most in the first half",
                     "yes" if far[-1] < first_half else "no"])
    shuffled = [r for r in bad_runs if any(p.get("data", {}).get("shuffle_labels") for p in r.cfg("parties", []))]
    clean = [r for r in bad_runs if r not in shuffled]
    for run in shuffled:
        party = next(p["name"] for p in run.cfg("parties") if p.get("data", {}).get("shuffle_labels"))
        w_bad = float(weight_trace(run)[1][-1][run.parties.index(party)])
        w_clean = float(weight_trace(clean[0])[1][-1][clean[0].parties.index(party)]) if clean else math.nan
        rows.append(["FV moves weight away from a harmful party", run.label,
                     f"final w_{party} {w_bad:.3f} (clean twin {w_clean:.3f}, uniform {1 / len(run.parties):.3f})",
                     "yes" if w_bad < 1 / len(run.parties) and not w_bad >= w_clean else "no"])
    return rows
