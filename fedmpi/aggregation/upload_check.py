"""Every upload is looked at before it is used, and a global model that is no longer finite stops the run naming
the uploads that made it so (docs/ARCHITECTURE.md, "The upload check").

Once per round, before the aggregator reads them, the server measures each upload's update norm
n_i = ‖θ_i − Θ‖ over the backbone's D values (θ_i: the upload's backbone; Θ: the global backbone the round started
from): one pass over the [P, D] rows, a block of columns at a time, summed in float64, read to the host once per
round.
An upload is out of range when n_i is not finite, or when n_i > ρ · median_{j≠i} n_j, ρ = fed.upload_check.norm_ratio
(the median of the others' finite norms: with two uploads the outlier is measured against the other one; the
rule is not applied where that median is 0 or there is no other). `fed.upload_check.action` says what follows:
  off      nothing (the norms are still logged, and named should the global model diverge later)
  warn     one line naming the upload, the round and the norms; aggregated as it is
  exclude  (the default) the same line; the upload takes no part in the round
  stop     the run ends with that line (exit status 3)
An excluded upload's row becomes [Θ | 0], a zero update, so that what reads the rows later (FV's θ', the influence
measure) sees finite values; then, by the aggregator (`Aggregator.clips_uploads`, `needs_uploads`):
  - the weighted mean: its weight 0, the others' renormalised (w_i / Σ_{kept} w_j);
  - a rule that reads every upload (median, trimmed mean, Krum, Bulyan): the rule over the other uploads, with their
    weights renormalised;
  - DP-FedAvg's Gaussian mechanism, which bounds every update itself (clip to C): the ratio rule is not applied (a
    decision that depends on the other parties' norms falls outside the mechanism's accounting, and the clip
    already bounds an outlier), and a non-finite upload counts as a zero update at its own weight, so that the
    sensitivity C max_i w_i the noise is calibrated to still holds.
When every upload is out of range there is nothing to aggregate and the run stops.
Where the exchange sums the uploads on the way (cross-device clients without a rule that reads each one), no
single upload can be measured or excluded: what arrives is checked through the global model after the step.

After each round's step (`after_round`) the global model must be finite, and so must every training loss the
round reports; else the run stops (`Diverged`) with one line naming the round and the out-of-range uploads that
were aggregated in it or before it (with action warn or off), or saying that none was. The check keeps no state
a checkpoint needs: a resumed run names what it has seen since the resume."""
from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import dataclass

import numpy as np
import torch

from fedmpi.aggregation.columns import BLOCK
from fedmpi.errors import Diverged


def update_norms(rows: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """[P] float64 ‖rows[i, :D] − reference‖ (D = reference's length) on the rows' device: one pass over the rows,
    a block of columns at a time, the differences in the rows' dtype (P x BLOCK values besides them), their squares
    summed in float64 (about the weighted mean's mat-vec in time: docs/PERFORMANCE.md)."""
    D = reference.numel()
    squares = torch.zeros(rows.shape[0], dtype=torch.float64, device=rows.device)
    for a in range(0, D, BLOCK):
        b = min(a + BLOCK, D)
        squares += torch.linalg.vector_norm(rows[:, a:b] - reference[a:b], dim=1, dtype=torch.float64).square()
    return squares.sqrt_()


def others_median(norms: np.ndarray) -> np.ndarray:
    """[P] the median of the other uploads' finite norms (NaN where there is none)."""
    out = np.full(len(norms), np.nan)
    for i in range(len(norms)):
        others = np.delete(norms, i)
        others = others[np.isfinite(others)]
        if len(others):
            out[i] = np.median(others)
    return out


def judge(norms: np.ndarray, norm_ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """(ratios [P]: n_i / median of the others' (NaN where not defined), out of range [P] bool)."""
    median = others_median(norms)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(median > 0, norms / median, np.nan)
    return ratios, ~np.isfinite(norms) | (ratios > norm_ratio)


@dataclass
class Verdict:
    """One round's look at the uploads (`measured` False where they were summed on the way)."""
    names: list[str]
    norms: np.ndarray          # [P] ‖θ_i − Θ‖, float64
    ratios: np.ndarray         # [P] n_i / the median of the others' (NaN where not defined)
    out_of_range: np.ndarray   # [P] bool
    excluded: np.ndarray       # [P] bool
    measured: bool = True

    def describe(self, i: int) -> str:
        """'‖θ_b − Θ‖ = 3.1e+06, 1e+06 x the median of the others' (3.05)'."""
        name, norm = self.names[i], self.norms[i]
        text = f"‖θ_{name} − Θ‖ = {norm:.3g}"
        if not math.isfinite(norm):
            return f"{text} (not finite)"
        if math.isfinite(self.ratios[i]):
            text += f", {self.ratios[i]:.3g} x the median of the others' ({norm / self.ratios[i]:.3g})"
        return text

    def norms_text(self) -> str:
        return ", ".join(f"{name} {norm:.3g}" for name, norm in zip(self.names, self.norms))


class KeptUploads:
    """The round's uploads less the excluded ones, as an aggregator that reads every upload takes them."""
    gives_uploads = True

    def __init__(self, rows: torch.Tensor, kept: torch.Tensor):
        self.rows = rows[kept]

    def weighted_mean(self, w, out: torch.Tensor) -> torch.Tensor:
        return torch.mv(self.rows.t(), w.to(device=self.rows.device, dtype=self.rows.dtype), out=out)


class UploadCheck:
    """The server's check of each round's uploads. `action`, `norm_ratio`: fed.upload_check's (checked by the
    config: off | warn | exclude | stop, > 1); `reference`: Θ, the global backbone (D values, updated in place
    by the server's step); `stream`: where the lines of warn and exclude go."""

    def __init__(self, action: str, norm_ratio: float, reference: torch.Tensor, stream=sys.stdout):
        self.action, self.norm_ratio, self.reference, self.stream = action, float(norm_ratio), reference, stream
        self.round = 0
        self.last: Verdict | None = None
        self.aggregated: dict[str, list[tuple[int, str]]] = {}   # upload name -> [(round, description)]

    @contextlib.contextmanager
    def naming_round(self, r: int):
        """Around round r: the check's lines and a `Diverged` raised inside name the round; a divergence not caused
        by the check itself names the out-of-range uploads aggregated so far."""
        self.round = r
        try:
            yield
        except Diverged as exc:
            raise Diverged(f"round {r + 1}: {exc.code}" + ("" if exc.names_uploads else self.blame()),
                           names_uploads=True) from None

    def __call__(self, uploads, w, clips_uploads: bool = False, needs_uploads: bool = False):
        """Look at the round's uploads (the exchange after its wait); returns (uploads, w) as the aggregator is to
        take them: the same, or without the excluded ones (the module's text)."""
        rows = uploads.rows if uploads.gives_uploads else None
        names = list(uploads.upload_names)
        if rows is None:
            unknown = np.full(len(names), np.nan)
            self.last = Verdict(names, unknown, unknown, np.zeros(len(names), bool), np.zeros(len(names), bool), False)
            return uploads, w
        D = self.reference.numel()
        norms = update_norms(rows, self.reference).cpu().numpy()          # the round's one read to the host
        ratios, out = judge(norms, math.inf if clips_uploads else self.norm_ratio)
        excluded = out if self.action == "exclude" else np.zeros_like(out)
        verdict = self.last = Verdict(names, norms, ratios, out, excluded)
        if not out.any():
            return uploads, w
        if self.action == "stop" or excluded.all():
            why = ("stopped (fed.upload_check.action=stop)" if self.action == "stop"
                   else "no upload is left to aggregate")
            raise Diverged("; ".join(f"upload of {names[i]} out of range: {verdict.describe(i)}"
                                     for i in np.flatnonzero(out))
                           + f"; {why}", names_uploads=self.action == "stop")   # else: and what went before
        for i in np.flatnonzero(out):
            self.say(verdict, i, clips_uploads)
        if not excluded.any():
            for i in np.flatnonzero(out):
                self.aggregated.setdefault(names[i], []).append((self.round, verdict.describe(i)))
            return uploads, w
        for i in np.flatnonzero(excluded):                     # a zero update: [Θ | 0]
            rows[i, :D].copy_(self.reference)
            rows[i, D:].zero_()
        if clips_uploads or w is None:
            return uploads, w
        kept = torch.from_numpy(np.flatnonzero(~excluded))
        w = kept_weights(w, kept)
        if needs_uploads:
            return KeptUploads(rows, kept.to(rows.device)), w[kept.to(w.device)]
        return uploads, w

    def say(self, verdict: Verdict, i: int, clips_uploads: bool) -> None:
        if self.action == "off":
            return
        if self.action == "warn":
            then = "aggregated as it is (fed.upload_check.action=warn)"
        elif clips_uploads:
            then = "excluded: a zero update at its weight (DP's sensitivity)"
        else:
            then = "excluded from the round (its weight 0, the others' renormalised)"
        self.stream.write(f"round {self.round + 1}: upload of {verdict.names[i]} out of range: {verdict.describe(i)}; "
                          f"{then}\n")
        self.stream.flush()

    def blame(self) -> str:
        """What the one line of a diverged run says of the uploads: the out-of-range ones aggregated so far, or
        that there was none."""
        if self.aggregated:
            first = sorted(self.aggregated.items(), key=lambda item: item[1][0][0])   # the earliest culprit first
            return "; out-of-range uploads aggregated: " + "; ".join(
                f"{name} in {rounds_text([r for r, _ in seen])} ("
                + (f"in round {seen[0][0] + 1}: " if len(seen) > 1 else "") + f"{seen[0][1]})"
                for name, seen in first)
        if self.last is not None and not self.last.measured:
            return (f"; the uploads of {', '.join(self.last.names)} were summed on the way: no single one could be "
                    "measured")
        norms = f" (update norms in round {self.round + 1}: {self.last.norms_text()})" if self.last else ""
        return f"; no out-of-range upload was aggregated{norms}"

    def after_round(self, r: int, theta: torch.Tensor, losses, parties: list[str]) -> None:
        """Raise `Diverged`, naming round r and the uploads, when Θ after the round's step, or a training loss the
        round reported, is not finite."""
        with self.naming_round(r):
            if not bool(torch.isfinite(theta).all()):
                raise Diverged("the global model is no longer finite after the aggregation")
            lost = [f"{party} {loss}" for party, loss in zip(parties, np.asarray(losses)) if not math.isfinite(loss)]
            if lost:
                raise Diverged(f"the training loss is not finite ({', '.join(lost)})")

    def log_columns(self, rows_of_log: int) -> dict[str, np.ndarray]:
        """The round's /rounds columns: `update_norm` and `uploads_excluded` per row of the log's per-party columns
        (one per upload; where the log has one row for many uploads, the cross-device clients, the largest norm
        and the number excluded; NaN norms where the uploads were summed on the way)."""
        v = self.last
        if v is None:
            return {"update_norm": np.full(rows_of_log, np.nan), "uploads_excluded": np.zeros(rows_of_log, np.int64)}
        if len(v.norms) == rows_of_log:
            return {"update_norm": v.norms.copy(), "uploads_excluded": v.excluded.astype(np.int64)}
        largest = np.nan if not v.measured or not len(v.norms) else float(np.max(np.where(
            np.isnan(v.norms), np.inf, v.norms)))
        return {"update_norm": np.full(rows_of_log, largest),
                "uploads_excluded": np.full(rows_of_log, int(v.excluded.sum()), np.int64)}


def kept_weights(w: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """w with the excluded entries 0 and the kept ones renormalised (uniform over the kept where they weigh 0)."""
    out = torch.zeros_like(w, dtype=torch.float64)
    kept = kept.to(w.device)
    out[kept] = w.to(torch.float64)[kept]
    total = out.sum()
    if total > 0:
        return out / total
    out[kept] = 1.0 / len(kept)
    return out


def rounds_text(rounds: list[int]) -> str:
    """[0, 1, 2, 5] -> 'rounds 1-3, 6'; [4] -> 'round 5' (0-based in, 1-based out)."""
    spans, start = [], None
    for k, r in enumerate(rounds):
        if start is None:
            start = r
        if k + 1 == len(rounds) or rounds[k + 1] != r + 1:
            spans.append(f"{start + 1}" if start == r else f"{start + 1}-{r + 1}")
            start = None
    return ("round " if len(rounds) == 1 else "rounds ") + ", ".join(spans)
