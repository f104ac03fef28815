"""The face clients' evaluation: Θ on the held-out folds of the pair sets (data.val_sets) and on the large-scale
benchmarks of eval.sets (the synthetic IJB-B/C, a release, MegaFace), as the silo runs evaluate them
(metrics/evaluator.py, fedmpi/evaluation/: the same columns in the log's /eval, the same evaluation line), on
the server when an evaluation is due."""
from __future__ import annotations

from fedmpi.crossdevice.evaluation import TestAccuracy
from fedmpi.data.sets import prepare_validation_sets
from fedmpi.data.verification_bin import load_bin
from fedmpi.evaluation.benchmarks import Benchmarks
from fedmpi.evaluation.held_out import accuracy_text, eval_columns
from fedmpi.metrics.evaluator import Evaluator


class Verification(TestAccuracy):
    what = "held-out accuracy"

    def __init__(self, setting, log, **kwargs):
        super().__init__(setting, log, **kwargs)
        cfg = setting.cfg
        sets = {name: load_bin(path, cfg.data.image_size)
                for name, path in prepare_validation_sets(cfg.data).items()}
        self.evaluator = Evaluator(sets, fv_folds=cfg.fv.folds, batch_size=cfg.eval.batch_size,
                                   device=setting.parts.device)
        # the benchmarks embed with the server's model itself, into which round_done wrote Θ
        self.benchmarks = Benchmarks.build(cfg, setting.parts, setting.parts.model)

    def measure(self) -> tuple[float, dict, str]:
        results = self.evaluator.evaluate(self.setting.parts.model)
        benchmarks = self.benchmarks.evaluate_backbone() if self.benchmarks else None
        mean = sum(m["accuracy"] for m in results.values()) / len(results)
        return mean, eval_columns(results, benchmarks), accuracy_text(results, benchmarks)
