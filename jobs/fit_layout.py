"""`python -m jobs.fit_layout --config F [key=val ...] --tasks-per-node '8(x2)' [--max-per-node 8]`

The overrides that shrink a config's layout into the allocation a job got (the Slurm scripts' requeue path, on
a smaller allocation than the run was started on): the party with the most ranks gives up ranks, one rank
count at a time, down to the next count that divides its batch per step (ranks x batch per rank, which stays:
the resumed run continues the same run, docs/CLUSTER.md), until the layout is placed on the nodes. Prints the
overrides on one line (`parties.NAME.ranks=R parties.NAME.batch_size=B ...`; nothing when the layout fits as
it is); exit 2 with one line when no layout with the parties' batches kept fits."""
from __future__ import annotations

import argparse
import sys

from jobs.placement import expand_tasks_per_node, place


def fitting_ranks(ranks: dict[str, int], batches: dict[str, int], capacities: list[int], extra: int,
                  bn_batch: int = 0) -> dict[str, int]:
    """Rank counts per party that fit `capacities` (server and `extra` validators beside them), each dividing
    its party's batch per step (and leaving a batch per rank that model.bn_batch divides)."""
    ranks = dict(ranks)

    def fits() -> bool:
        layout = {"world": 1 + sum(ranks.values()) + extra, "server": 1, "parties": ranks, "validators": extra}
        try:
            nodes = place(layout, capacities)
        except ValueError:
            return False
        return all(len(n) <= c for n, c in zip(nodes, capacities))

    def allowed(name: str, count: int) -> bool:
        per_rank, rest = divmod(batches[name], count)
        return rest == 0 and (not bn_batch or per_rank % bn_batch == 0)

    while not fits():
        shrinkable = [n for n in ranks if any(allowed(n, c) for c in range(1, ranks[n]))]
        if not shrinkable:
            raise ValueError(f"no layout with the parties' batches per step kept fits {sum(capacities)} slots "
                             f"({', '.join(map(str, capacities))}): "
                             + ", ".join(f"{n} {batches[n]} images" for n in ranks))
        name = max(shrinkable, key=lambda n: ranks[n])
        ranks[name] = max(c for c in range(1, ranks[name]) if allowed(name, c))
    return ranks


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.fit_layout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None)
    parser.add_argument("--tasks-per-node", required=True, help="SLURM_TASKS_PER_NODE, e.g. '8(x2),4'")
    parser.add_argument("--max-per-node", type=int, default=0, help="GPUs per node (0: no cap)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_intermixed_args(argv)
    from fedmpi.layout import build_layout
    from fedmpi.config import ConfigError, load_config
    from fedmpi.layout import party_batches

    try:
        cfg = load_config(args.config, args.overrides)
        layout = build_layout(cfg)
        capacities = [min(c, args.max_per_node) if args.max_per_node else c
                      for c in expand_tasks_per_node(args.tasks_per_node)]
        batches = party_batches(cfg, layout)
        before = {p.name: len(p.ranks) for p in layout.parties}
        after = fitting_ranks(before, batches, capacities, len(layout.validators), cfg.model.bn_batch)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(" ".join(f"parties.{n}.ranks={after[n]} parties.{n}.batch_size={batches[n] // after[n]}"
                   for n in after if after[n] != before[n]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
