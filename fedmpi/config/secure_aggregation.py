"""`fed.secure_aggregation`: the server learns only the parties' sum (fedmpi/secagg; docs/BASELINES.md, "Secure
aggregation"). Checked before any rank starts: the fixed point must not wrap for the run's participants, and what
needs each party's upload, or sends something the sum cannot carry, is refused in one line with the reason."""
from __future__ import annotations

from dataclasses import dataclass

from fedmpi.config.rules import algorithm_method
from fedmpi.config.sections import fv_runs
from fedmpi.errors import ConfigError

KEY = "fed.secure_aggregation"
# the rules whose server step reads only Σ w_i u_i of the uploads (θ_i and, SCAFFOLD's, the control-variate deltas)
COMPOSES = ("fedavg", "fedavgm", "pfm", "fedprox", "fedadam", "fedyogi", "fedadagrad", "scaffold", "feddyn")


@dataclass
class SecureAggregationConfig:
    mode: str = "off"                # off | secagg (every party masks with every other) | secagg+ (k neighbours)
    clipping_range: float = 8.0      # c: each entry of a party's weighted update is clipped to [-c, c]
    quantization_bits: int = 22      # T = 2^bits levels over [-c, c] (step 2c/T); the modulus bits are derived
    neighbours: int = 0              # secagg+: k, even (0: every other party, as secagg)
    threshold: int = 0               # t of the Shamir shares (0: a majority of the k + 1 holders, floor((k+1)/2) + 1)
    seed: int = 0                    # the stochastic rounding's generator (not a secret; keys use OS entropy)

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def validate(self, cfg, fail) -> None:
        if not self.enabled:
            return
        why = refusal(cfg)
        if why:
            fail(f"{KEY}.mode", why)
        from fedmpi.config.aggregation import uploads
        from fedmpi.secagg.encoding import Encoding
        n = uploads(cfg)
        try:
            Encoding(self.clipping_range, self.quantization_bits, n, KEY)
        except ConfigError as exc:
            raise ConfigError(str(exc)) from None
        degree = self.degree(n)
        if degree is not None and (degree < 2 or degree % 2):
            fail(f"{KEY}.neighbours", f"must be even and at least 2 (a k-regular ring), got {self.neighbours}")
        holders = (degree or n - 1) + 1
        if not 2 <= self.threshold_for(n) <= holders:
            fail(f"{KEY}.threshold", f"must lie in [2, {holders}] (a participant's {holders - 1} neighbours and "
                                     f"itself hold its shares), got {self.threshold_for(n)}; or 0 for the "
                                     f"default {self.default_threshold(n)}")

    def degree(self, n: int) -> int | None:
        """SecAgg+'s k, or None where every party masks with every other."""
        return self.neighbours if self.mode == "secagg+" and 0 < self.neighbours < n - 1 else None

    def default_threshold(self, n: int) -> int:
        from fedmpi.secagg.graph import default_threshold
        return default_threshold((self.degree(n) or n - 1) + 1)

    def threshold_for(self, n: int) -> int:
        return self.threshold or self.default_threshold(n)

    def describe(self, n: int) -> str:
        """The start-up line's words for the session of n participants."""
        k = self.degree(n)
        graph = f"{k} neighbours each" if k else "every participant with every other"
        return (f"secure aggregation: {self.mode}, {n} participants a round, {graph}, threshold t = "
                f"{self.threshold_for(n)} of the {(k or n - 1) + 1} holders of each participant's shares")


def refusal(cfg) -> str:
    """Why secure aggregation cannot serve this run, or ''."""
    from fedmpi.config.aggregation import uploads
    if cfg.fed.setting != "federated" or uploads(cfg) < 2:
        return ("needs at least two participants (parties, or clients per round) in fed.setting=federated: a sum "
                "of one upload is that upload")
    if fv_runs(cfg):
        return ("Federated Validation scores each party's theta_i, which the server no longer sees: set "
                "fv.enabled=false (FedFace's FV cannot run under secure aggregation, docs/BASELINES.md)")
    if cfg.fed.aggregation.get("rule", "mean") != "mean":
        return (f"fed.aggregation.rule={cfg.fed.aggregation['rule']} needs each upload; the server sees only "
                f"their sum: use rule mean")
    if cfg.fed.dp.enabled and cfg.fed.dp.adaptive:
        return ("fed.dp.adaptive needs the count of unclipped updates, which distributed DP does not sum: set "
                "fed.dp.adaptive=false")
    if cfg.fed.dp.enabled and not cfg.cross_device and cfg.fed.weighting != "uniform":
        return ("distributed DP (fed.dp under secure aggregation) weighs the parties alike: each adds the same "
                "share of the noise; set fed.weighting=uniform")
    rule = algorithm_method(cfg)
    if cfg.cross_device and rule.client_state:
        return (f"{rule.name}'s clients' states ({', '.join(rule.client_state)}) are kept by the server, one per "
                f"client, in the clear: use a stateless rule across devices")
    if cfg.cross_device and cfg.clients.face_clients:
        return ("the face clients' class embeddings (one row each: with one identity a client, its owner's face "
                "template) are kept by the server, one per client, in the clear: use clients.dataset=cifar10 (or "
                "synthetic), or the silo setting")
    if rule.classes.leaves:
        return (f"{rule.name} sends each party's class embeddings (or their summaries) for a step on every row, "
                f"which a sum cannot give: use one of {', '.join(COMPOSES)}")
    if rule.name not in COMPOSES:
        return (f"{rule.name}'s server step needs more than the parties' weighted sum: use one of "
                f"{', '.join(COMPOSES)}")
    return ""
