"""PrivacyFace (Meng et al. 2022, "Improving Federated Learning Face Recognition via Privacy-Agnostic
Clusters"; spec §3): the backbones are averaged as in FedAvg; every `release_every` rounds each party's leader
distils its class embeddings into Q differentially private clusters (fedmpi/algorithms/dplc.py, the reference
design: a reconstruction), the server relays to each party the clusters of all the others, and each party's
margin head adds one negative logit s·cos(max(φ_q − α_q, 0)) per received cluster (the consensus-aware loss,
fedmpi/models/cone_negatives.py) until the next release. No class embedding leaves its party, not even to the
server; the (ε, δ) of each release and in total (basic composition) are in the log's `classes` table, on the
progress line and in the summary. A party does not use its own clusters.

Across devices (personal albums, `clients.dataset=faces`, a few identities a client): each sampled client runs
the same DPLC over its own rows on the device after its local steps (`summarise` with device=True: the device's
n_min), the server pools the clusters of the last `pool_rounds` rounds and relays the pool to the next cohort,
whose clients use every cluster of the others as a negative cone (crossdevice/album_clusters.py,
crossdevice/cluster_relay.py). A client spends one release each round it is sampled."""
from __future__ import annotations

from dataclasses import dataclass

from fedmpi.algorithms.class_parts import SummaryPart
from fedmpi.algorithms.class_rules import ClassRuleOptions
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.method import Method
from fedmpi.errors import ConfigError

SELECTIONS = ("exponential", "noisy_max")


@dataclass
class PrivacyFaceOptions(ClassRuleOptions):
    clusters: int = 1                # Q: clusters per party and release
    candidates: int = 512            # M: random candidate directions per cluster
    kappa: float = 0.8               # the cone's cosine threshold κ (angular radius α = arccos κ)
    epsilon_select: float = 0.1      # ε₁: the exponential mechanism's choice of a candidate
    epsilon_count: float = 0.1       # ε₂: the Laplace count
    epsilon_sum: float = 0.5         # ε₃: the Gaussian sum (< 1: the classical Gaussian mechanism)
    delta: float = 1e-5              # δ of each cluster's Gaussian sum
    min_count: float = 20.0          # n_min: a cluster whose noisy count is below it is not released
    selection: str = "exponential"   # exponential | noisy_max (report-noisy-max, Laplace(2/ε₁))
    release_every: int = 1           # rounds between releases; the clusters received are used until the next
    seed: int = 0                    # the mechanisms' draws come from (seed, party, release)
    # across devices (an album of a few identities never reaches the parties' n_min of 20): the device's n_min,
    # and how many rounds' releases the server keeps in the pool it relays to the next cohort
    device_min_count: float = 1.0
    pool_rounds: int = 1

    def validate(self, cfg) -> None:
        super().validate(cfg)
        if self.selection not in SELECTIONS:
            raise ConfigError(f"fed.options.selection: {self.selection!r} is not one of {', '.join(SELECTIONS)}")
        if not 0 < self.epsilon_sum < 1:
            raise ConfigError(f"fed.options.epsilon_sum: the classical Gaussian mechanism needs 0 < epsilon_sum < 1, "
                              f"got {self.epsilon_sum}")
        if not 0 < self.delta < 1:
            raise ConfigError(f"fed.options.delta: must be in (0, 1), got {self.delta}")
        if not -1 < self.kappa < 1:
            raise ConfigError(f"fed.options.kappa: must be in (-1, 1), got {self.kappa}")
        for key in ("min_count", "device_min_count"):
            if getattr(self, key) < 0:
                raise ConfigError(f"fed.options.{key}: must be >= 0, got {getattr(self, key)}")
        self.check_positive("clusters", "candidates", "epsilon_select", "epsilon_count", "release_every",
                            "pool_rounds")

    def validate_devices(self, cfg) -> None:
        """An album: one identity a client would make its release its owner's face template (DPLC over one row, with
        noise) and its softmax one without a negative of its own; a client releases each round it is sampled."""
        super().validate_devices(cfg)
        if cfg.clients.identities_per_client < 2:
            raise ConfigError("clients.identities_per_client: privacyface needs an album (>= 2 identities a client): "
                              "over one identity its DP cluster is its owner's face template with noise and its "
                              "softmax has no negative of its own")
        if self.release_every != 1:
            raise ConfigError(f"fed.options.release_every: across devices a client releases its clusters each round "
                              f"it is sampled; leave it 1, got {self.release_every}")

    @property
    def budget(self):
        from fedmpi.algorithms.dplc import Budget

        return Budget(self.clusters, self.epsilon_select, self.epsilon_count, self.epsilon_sum, self.delta)


class PrivateClusters(SummaryPart):
    """Each party's differentially private clusters of W_k, relayed to the other parties."""
    leaves = "differentially private clusters of the class embeddings"
    columns = {"round": ((), "i8"), "releases": ((), "i8"), "released": ((), "i8"),
                     "epsilon_release": ((), "f8"), "delta_release": ((), "f8"), "epsilon": ((), "f8"),
                     "delta": ((), "f8"), "noise_std": ((), "f8")}

    def due(self, r):
        return (r + 1) % self.options.release_every == 0

    @property
    def kept_rounds(self):
        return self.options.pool_rounds

    def summary_shape(self, d):
        return self.options.clusters, d + 2          # [p | α | released]

    def summarise(self, W, out, r, who, state, *, device=False):
        """The DPLC clusters of W (a party's, or a device's own rows with the device's n_min), the draws from
        (seed, party or client, release): across devices a client releases each round it is sampled
        (release_every is 1 there), so its release is the round."""
        import torch

        from fedmpi.algorithms.dplc import cluster, generator

        o = self.options
        unit = torch.nn.functional.normalize(W.detach().to(torch.float64), dim=1)
        cluster(unit.cpu(), out, kappa=o.kappa, budget=o.budget, candidates=o.candidates,
                min_count=o.device_min_count if device else o.min_count, selection=o.selection,
                rng=generator(o.seed, who, (r + 1) // o.release_every - 1))

    def server_state(self):
        import torch

        return {"releases": torch.zeros((), dtype=torch.int64)}

    def privacy_row(self, releases: int) -> dict:
        """The log's privacy columns after `releases` releases (of a party, or of the client that released most)."""
        from fedmpi.algorithms.dplc import gaussian_sigma

        o = self.options
        epsilon, delta = o.budget.spent(releases)
        return {"releases": releases, "epsilon_release": o.budget.epsilon, "delta_release": o.budget.release_delta,
                "epsilon": epsilon, "delta": delta, "noise_std": gaussian_sigma(o.kappa, o.epsilon_sum, o.delta)}

    def relayed(self, most, state):
        """The privacy spent by the client that released most."""
        state["releases"].fill_(most)
        return self.privacy_row(most)

    def client_sends(self, d, rounds):
        from fedmpi.algorithms.dplc import gaussian_sigma

        o = self.options
        epsilon, delta = o.budget.epsilon, o.budget.release_delta
        most, most_delta = o.budget.spent(rounds)
        sigma = gaussian_sigma(o.kappa, o.epsilon_sum, o.delta)
        return (f"DP clusters ({o.clusters} x {d + 2} values a round it is sampled, each release ({epsilon:.3g}, "
                f"{delta:.3g})-DP, noise std {sigma:.3g} a coordinate of its sum; a client sampled every round "
                f"spends ({most:.3g}, {most_delta:.3g}))")

    def relay(self, uploads, replies, r, state):
        """Party k's reply: the other parties' summaries in party order."""
        P, Q = uploads.shape[0], uploads.shape[1]
        for k in range(P):
            others = [j for j in range(P) if j != k]
            for slot, j in enumerate(others):
                replies[k, slot * Q:(slot + 1) * Q].copy_(uploads[j])
        state["releases"] += 1
        return {**self.privacy_row(int(state["releases"])), "released": int((uploads[:, :, -1] > 0).sum())}

    def note(self, state):
        return f"clusters eps {self.options.budget.spent(int(state['releases']))[0]:.3g}"

    def summary(self, state):
        o, releases = self.options, int(state["releases"])
        epsilon, delta = o.budget.spent(releases)
        return (f"  privacy of the clusters: epsilon {epsilon:.4g} at delta {delta:.3g} ({releases} releases of "
                f"{o.clusters} cluster(s) per party, or by the client that released most, each release "
                f"({o.budget.epsilon:.4g}, {o.budget.release_delta:.3g})-DP by basic composition)\n")


PrivacyFace = Method("privacyface", "PrivacyFace", "#2f4b7c", PrivacyFaceOptions, FedAvg, classes=PrivateClusters)
