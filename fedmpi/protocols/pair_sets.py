"""Any model on any `.bin` pair set, post hoc (`python -m tools.evaluate MODEL --pairs a.bin b.bin`): the metrics
the in-run evaluation computes, by the same Evaluator (fedmpi/metrics/evaluator.py).

folds `all` (default): insightface's verification protocol, 10 contiguous folds, each scored at the threshold
chosen on the other 9; accuracy is the mean ± std over the 10, TAR@FAR is read on every pair. folds `held-out`:
the run's own numbers (what log.h5's /eval holds), the 5 folds FV does not use (`--fv-folds` = the run's
fv.folds), their thresholds from the other 9, TAR@FAR on their pairs.

flip `sum` (default): each image's embedding is f(x) + f(flipped x), L2-normalised, as insightface's
eval/verification.py scores (and the run does); `none`: f(x) alone."""
from __future__ import annotations

import json
from pathlib import Path

from fedmpi.metrics.roc import tar_key

FOLDS = ("all", "held-out")
FLIPS = ("sum", "none")


def evaluate_pairs(backbone, paths, image_size: int, *, folds: str = "all", fv_folds: str = "first",
                   flip: str = "sum", fars=(1e-3, 1e-2), batch_size: int = 128, device="cpu") -> dict[str, dict]:
    """{set name (the file's stem): {pairs, accuracy, accuracy_std, tar@far=...}} for each `.bin` in `paths`."""
    from fedmpi.data.verification_bin import load_bin
    from fedmpi.metrics.evaluator import Evaluator
    from fedmpi.metrics.verification import split_fv_folds

    results = {}
    for path in paths:
        name = Path(path).stem
        images, issame = load_bin(path, image_size)
        evaluator = Evaluator({name: (images, issame)}, fv_folds=fv_folds, batch_size=batch_size, device=device,
                              fars=fars, flip=flip == "sum")
        scores = evaluator.pair_scores(backbone)
        held = list(range(evaluator.n_folds)) if folds == "all" else split_fv_folds(fv_folds, evaluator.n_folds)[1]
        results[name] = {"pairs": len(issame), **evaluator.fold_metrics(scores, held)[name]}
    return results


def pairs_table(results: dict[str, dict], fars, title: str) -> str:
    """A Markdown table: one row per set, accuracy ± std (%) and TAR (%) at each FAR."""
    head = ["set", "pairs", "accuracy % (± std)"] + [f"TAR % @ FAR={far:g}" for far in fars]
    lines = [title, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in results.items():
        cells = [name, str(m["pairs"]), f"{100 * m['accuracy']:.2f} ± {100 * m['accuracy_std']:.2f}"]
        cells += [f"{100 * m[tar_key(far)]:.2f}" for far in fars]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_pairs_report(backbone, image_size: int, description: str, paths, out: Path, *, folds: str, fv_folds: str,
                       flip: str, fars, batch_size: int, device) -> str:
    """Score the pair sets; write OUT/pairs.md (the table) and OUT/pairs.json (every digit); return the table and
    what was written."""
    results = evaluate_pairs(backbone, paths, image_size, folds=folds, fv_folds=fv_folds, flip=flip, fars=fars,
                             batch_size=batch_size, device=device)
    title = (f"{description}: pair verification, {folds} folds"
             f"{f' (fv.folds={fv_folds})' if folds == 'held-out' else ''}, flip {flip}")
    table = pairs_table(results, fars, title)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pairs.md").write_text(table)
    (out / "pairs.json").write_text(json.dumps({"model": description, "folds": folds, "flip": flip,
                                                "sets": results}, indent=1))
    return table + f"wrote {out / 'pairs.md'} and {out / 'pairs.json'}"
