"""The tiny silo layout the launch tests and the harness share, with no import of fedmpi (the harness runs it
against other worktrees' code): party a of 2 ranks (DDP, sharded classifier), party b of 1, 16 px, float64."""

# lr drops after round 3 (a round boundary)
SMALL = [
    "parties=[{name: a, ranks: 2, data: {style: ms1m, identities: 7, images_per_identity: 4}},"
    " {name: b, ranks: 1, data: {style: ga, identities: 5, images_per_identity: 4}}]",
    "data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=4",
    "model.width=0.125", "model.embedding_size=16", "model.scale=16.0",
    "optim.batch_size=8", "optim.epochs=2", "optim.steps_per_epoch=3", "optim.milestones=[1]",
    "run.dtype=float64", "eval.every=0",
]


def rule_overrides(overrides: list[str], rounds: int = 2, K: int = 2) -> list[str]:
    """A tiny run of a rule: SMALL's layout, `rounds` rounds of K steps, a checkpoint every round."""
    return [*SMALL, f"fed.K={K}", f"optim.steps_per_epoch={K * rounds}", "optim.epochs=1", "optim.milestones=[]",
            "checkpoint.every=1", f"checkpoint.keep={rounds}", *overrides]
