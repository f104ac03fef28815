"""Model-parallel classifier under mpirun (gloo, float64, real process groups).

Per rank count, one launch of tests/support/mpi_scripts/classifier_equivalence.py checks, for ArcFace and CosFace and
class counts that do not divide evenly: loss, class-centre and embedding gradients of the sharded classifier
equal a single-rank full classifier; shard shapes are ceil/floor(C/n); unequal per-rank batches; sampled
negatives keep every positive. The 4-rank launch also trains a DDP party with the sharded classifier and
checks it follows the replicated-classifier run step for step.
"""
import pytest

from jobs.mpirun import mpirun

SCRIPT = "tests/support/mpi_scripts/classifier_equivalence.py"


def _run(ranks: int, *extra: str):
    result = mpirun(ranks, [SCRIPT, "--tol", "1e-9", *extra], timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.parametrize("ranks", [1, 3])
def test_sharded_equals_full_classifier(ranks):
    assert f"classifier equivalence ok on {ranks} ranks" in _run(ranks)


def test_sharded_equals_full_classifier_and_party_gradients_compress_on_2_ranks():
    """The 2-rank launch also checks a party's mean gradient with run.ddp_compression: PartyGradients exact
    uncompressed and bit for bit the sum of the rounded shares in fp16/bf16; DDP with its compression hooks."""
    out = _run(2, "--party-gradients")
    assert "classifier equivalence ok on 2 ranks" in out
    assert "party gradients ok on 2 ranks" in out


def test_four_rank_party_equivalence_and_training_matches_replicated():
    out = _run(4, "--train-steps", "3")
    assert "classifier equivalence ok on 4 ranks" in out
    assert "sharded training follows replicated on 4 ranks" in out
