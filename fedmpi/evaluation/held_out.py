"""The held-out evaluation's record, in either setting: the run log's /eval row of Θ's metrics on every pair set
(and on the benchmarks of eval.sets, benchmarks.py), the evaluation line printed with it, and the closing table
of the final model's accuracy next to the first evaluation's. A diverged model (embeddings not finite) is logged
with NaN metrics and said so in its line."""
from __future__ import annotations

from fedmpi.evaluation.benchmarks import headline_line
from fedmpi.metrics.evaluator import diverged
from fedmpi.store.h5log import EVAL_METRICS

# Evaluator's metric names -> the run log's column names
LOG_METRIC = {"accuracy": "accuracy", "accuracy_std": "accuracy_std", "tar@far=0.001": "tar_far_1e-3",
              "tar@far=0.01": "tar_far_1e-2"}
assert set(LOG_METRIC.values()) == set(EVAL_METRICS)


def eval_columns(results: dict[str, dict[str, float]], benchmarks: dict[str, dict[str, float]] | None = None) -> dict:
    """The /eval columns of one evaluation: <set>/<metric> of the pair sets, then of the benchmarks."""
    columns = {}
    for name, metrics in results.items():
        for key, column in LOG_METRIC.items():
            columns[f"{name}/{column}"] = metrics[key]
    for name, metrics in (benchmarks or {}).items():
        columns.update({f"{name}/{metric}": value for metric, value in metrics.items()})
    return columns


def log_row(r: int, step: int, results: dict[str, dict[str, float]],
            benchmarks: dict[str, dict[str, float]] | None = None) -> dict:
    return {"round": r, "step": step, **eval_columns(results, benchmarks)}


def accuracy_text(results: dict, benchmarks: dict | None = None) -> str:
    """'held-out accuracy % lfw 99.10  ...' with the benchmarks' headlines and the sets it diverged on."""
    parts = "  ".join(f"{name} {100 * m['accuracy']:.2f}" for name, m in results.items())
    extra = f"; {headline_line(benchmarks)}" if benchmarks else ""
    lost = [name for name, m in results.items() if diverged(m)]
    if lost:
        extra += f"; diverged: the global model's embeddings are not finite on {', '.join(lost)} (NaN logged)"
    return f"held-out accuracy % {parts}{extra}"


def accuracy_line(r: int, results: dict, benchmarks: dict | None = None) -> str:
    return f"eval after round {r + 1}: {accuracy_text(results, benchmarks)}"


def accuracy_table(first: tuple[int, dict], last: tuple[int, dict]) -> str:
    """Held-out accuracy (mean ± std over the held-out folds, %) per set: first evaluation next to the last."""
    (r0, a), (r1, b) = first, last
    width = max(len("mean"), *(len(n) for n in a))
    lines = ["held-out accuracy of the global model (%)",
             f"  {'set':<{width}}  {f'round {r0 + 1}':>15}  {f'round {r1 + 1}':>15}  {'change':>7}"]

    def cell(m):
        return f"{100 * m['accuracy']:6.2f} ± {100 * m['accuracy_std']:5.2f}"

    for name in a:
        change = 100 * (b[name]["accuracy"] - a[name]["accuracy"])
        lines.append(f"  {name:<{width}}  {cell(a[name]):>15}  {cell(b[name]):>15}  {change:+7.2f}")
    mean_a = sum(m["accuracy"] for m in a.values()) / len(a)
    mean_b = sum(m["accuracy"] for m in b.values()) / len(b)
    lines.append(f"  {'mean':<{width}}  {100 * mean_a:15.2f}  {100 * mean_b:15.2f}  {100 * (mean_b - mean_a):+7.2f}")
    return "\n".join(lines)


def logged_first(log) -> tuple[int, dict] | None:
    """(round, {set: accuracy and std}) of the first evaluation already in the log (a resumed run's), or None."""
    table = getattr(log, "f", None) and log.f.get("eval")
    if table is None or "round" not in table or not table["round"].shape[0]:
        return None
    sets = [name for name in table if "accuracy" in getattr(table[name], "keys", dict)()]
    return int(table["round"][0]), {s: {"accuracy": float(table[f"{s}/accuracy"][0]),
                                        "accuracy_std": float(table[f"{s}/accuracy_std"][0])} for s in sets}
