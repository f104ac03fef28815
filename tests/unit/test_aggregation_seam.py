"""The aggregation seam (fedmpi/aggregation): a rule that needs every upload plugs in an aggregator and the
server's step (ServerStep, the code Server.run calls) takes it; the default stays the one mat-vec.

The coordinate-wise median here is test-only: it shows what such a rule touches (an aggregator class and the
rule's `aggregator` attribute; nothing in the exchange or the server)."""
import pytest
import torch

from algorithm_harness import WD, GatheredUploads, federated, float64  # noqa: F401
from fedmpi.aggregation.aggregators import Aggregator, WeightedMean, check_exchange
from fedmpi.aggregation.server_step import ServerStep
from fedmpi.algorithms import ServerOptimizer
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.fedavgm import FedAvgM
from fedmpi.algorithms.scaffold import Scaffold
from fedmpi.core.state import BackboneState
from fedmpi.core.payloads import Payloads

pytestmark = pytest.mark.usefixtures("float64")


class CoordinateMedian(Aggregator):
    """Each coordinate of every upload (θ and the up payloads): the median over the parties (odd P), w unused."""
    needs_uploads = True

    def __call__(self, uploads, w, out):
        return out.copy_(uploads.rows.median(dim=0).values)


class FedMedian(FedAvg):
    name, label = "fedmedian", "FedMedian"
    aggregator = CoordinateMedian


ROWS = torch.tensor([[1.0, 10.0, -3.0, 0.5],
                     [4.0, -2.0, 7.0, 0.25],
                     [2.0, 5.0, 0.0, 100.0]])


def server(algorithm, aggregator=None):
    """A server step over a model of 3 trainable values and 1 float buffer (D = 4, n = 3), Θ = 0."""
    model = torch.nn.Linear(3, 1, bias=False)
    model.register_buffer("running", torch.zeros(1))
    state = BackboneState(model)
    cpu, dtype = torch.device("cpu"), torch.float64
    down, mean = Payloads(state, algorithm.down, cpu, dtype), Payloads(state, algorithm.up, cpu, dtype)
    algo_state = algorithm.init_server_state(down.trainable, down.extra)
    step = ServerStep(algorithm, aggregator or algorithm.aggregator(), down, mean, algo_state, state.n_trainable)
    uploads = GatheredUploads(3, mean.flat.numel())
    return step, uploads, down


def test_the_default_is_the_weighted_mean_and_a_rule_may_take_the_median_instead():
    w = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    step, uploads, down = server(FedAvg())
    assert isinstance(step.aggregator, WeightedMean)
    uploads.rows.copy_(ROWS)
    step(uploads, w)
    assert down.theta.tolist() == [2.0, 5.75, 0.25, 25.3125]            # Σ w_i θ_i, the buffer too

    step, uploads, down = server(FedMedian())
    uploads.rows.copy_(ROWS)
    step(uploads, w)
    assert down.theta.tolist() == [2.0, 5.0, 0.0, 0.5]                   # the coordinate-wise median


def test_the_median_goes_through_the_rules_server_step():
    """FedAvgM's server momentum steps on Δ = Θ − median (trainable prefix); the buffer takes the median."""
    rule = FedAvgM(server=ServerOptimizer.build("momentum", 1.0, momentum=0.9, nesterov=False))
    step, uploads, down = server(rule, CoordinateMedian())
    uploads.rows.copy_(ROWS)
    step(uploads, torch.full((3,), 1 / 3, dtype=torch.float64))
    assert down.theta.tolist() == [2.0, 5.0, 0.0, 0.5]                   # v = Δ = −median, Θ − v = median
    step(uploads, torch.full((3,), 1 / 3, dtype=torch.float64))
    # Δ = Θ − median = 0, so v = 0.9 v and Θ = median + 0.9 median on the trainable prefix; the buffer: median
    assert down.theta.tolist() == pytest.approx([1.9 * 2.0, 1.9 * 5.0, 0.0, 0.5], rel=1e-15)


def test_an_aggregator_that_needs_every_upload_sees_the_rules_payloads():
    """SCAFFOLD's upload is [θ_i | Δc_i]: the median is taken over both, and c moves by the median Δc."""
    step, uploads, down = server(Scaffold(), CoordinateMedian())
    rows = torch.cat([ROWS, torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.0, 9.0], [5.0, 1.0, 4.0]])], dim=1)
    uploads.rows.copy_(rows)
    step(uploads, torch.full((3,), 1 / 3, dtype=torch.float64))
    assert down.theta.tolist() == [2.0, 5.0, 0.0, 0.5]
    assert down.extra["control"].tolist() == [1.0, 1.0, 4.0]


def test_a_median_rule_drives_like_any_other():
    """Three parties through the whole round (local steps, the server step, on_global): with the median the
    global model differs from FedAvg's mean, and with one party it is that party's model (median = mean)."""
    fedavg = federated(FedAvg(weight_decay=WD), K=2, rounds=2, lrs=[0.1, 0.1], weights=[1 / 3] * 3)
    median = federated(FedMedian(weight_decay=WD), K=2, rounds=2, lrs=[0.1, 0.1], weights=[1 / 3] * 3)
    assert (fedavg - median).abs().max() > 1e-4
    one = federated(FedAvg(weight_decay=WD), K=2, rounds=2, lrs=[0.1, 0.1], weights=[1.0], parties=1)
    one_median = federated(FedMedian(weight_decay=WD), K=2, rounds=2, lrs=[0.1, 0.1], weights=[1.0], parties=1)
    assert torch.equal(one, one_median)


def test_an_exchange_that_sums_on_the_way_refuses_it():
    class Reducing:
        gives_uploads = False

    check_exchange(WeightedMean(), Reducing(), "fedavg")
    with pytest.raises(ValueError, match=r"^fed.algorithm=fedmedian: its aggregator \(CoordinateMedian\) needs "
                                         r"every upload, which Reducing does not keep \(it sums them on the way\)$"):
        check_exchange(CoordinateMedian(), Reducing(), "fedmedian")


def test_every_registered_aggregator_imports_under_its_name():
    """The registry names each rule's module and class (imported when a config names it): each entry resolves,
    to the class that declares that name."""
    from fedmpi.aggregation.registry import AGGREGATORS, aggregator_class

    assert [aggregator_class(name).name for name in AGGREGATORS] == list(AGGREGATORS)
    assert list(AGGREGATORS) == ["mean", "median", "trimmed_mean", "krum", "multikrum", "bulyan"]
