"""`python -m tools.audit RUN --round R [--attack NAME ...] [--party NAME] [--out DIR]`: a privacy audit that
plays the server.

It takes what the server of RUN received in round R (recorded by the run: log.record_received=[R], the file
RUN/received/round-R.h5, fedmpi/core/received.py) and runs the attacks named by --attack on it, each from what the
server held and scored against the participants' own data (read from the run's data to score only):

  inversion   the images behind one upload (a silo party's, --party; device clients', --client) or behind the
              round's aggregate (--upload aggregate; under secure aggregation the only view) reconstructed by
              simulating the participants' local steps, scored by PSNR / SSIM and by identity at --far against
              chance, under a model that did not train on the participants' data: the run's model.init, or
              --evaluation-model (fedmpi/audit/update_audit.py, evaluation.py)
  templates   the class rows uploaded beside θ (FedAwS / FedGC) re-identified against every participant's
              template, top-1 and at --far against chance 1 / gallery; PrivacyFace's clusters: the identities
              inside each cone beside the ε spent (fedmpi/audit/template_audit.py)
  membership  identity membership inference on Θ after the round (AUC), beside the run's accounted ε and the
              AUC that (ε, δ) permits; in the silo against the held-out identities of --nonmembers
              (fedmpi/audit/membership_audit.py)

Writes audit.json, audit.md and the attacks' pictures into DIR (default RUN/audit-rR) and nothing else.
docs/PRIVACY_AUDIT.md says what is attacked and what not.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedmpi.audit import membership_audit, template_audit, update_audit
from fedmpi.audit.report import write_report
from fedmpi.audit.run_view import Refused, open_round

ATTACKS = {module.NAME: module for module in (update_audit, template_audit, membership_audit)}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tools.audit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the run folder (holds log.h5 and received/)")
    parser.add_argument("--round", type=int, required=True, help="the round to audit, from 1")
    parser.add_argument("--attack", nargs="+", choices=sorted(ATTACKS), default=["inversion"],
                        help="the attacks to run, in this order (default: inversion)")
    parser.add_argument("--party", help="whose upload to attack (default: the round's first upload)")
    parser.add_argument("--upload", choices=["one", "aggregate"],
                        help="inversion: one participant's upload, or the round's aggregate theta_after - "
                             "theta_before (default: one; aggregate under secure aggregation)")
    parser.add_argument("--client", nargs="+", help="inversion: the device clients to attack, or all "
                                                    "(default: the round's first upload)")
    parser.add_argument("--out", type=Path, help="the report's folder (default RUN/audit-rR)")
    parser.add_argument("--iterations", type=int, default=500, help="optimisation steps per restart")
    parser.add_argument("--restarts", type=int, default=1)
    parser.add_argument("--tv", type=float, default=1e-4, help="inversion: the weight α of the total-variation "
                                                              "prior beside the cosine distance (Geiping et al.)")
    parser.add_argument("--evaluation-model", metavar="PATH",
                        help="inversion: the model that scores identity, a state_dict of the run's backbone that did "
                             "not train on the participants' data (default: the run's model.init)")
    parser.add_argument("--nonmembers", nargs="+", metavar="DIR",
                        help="membership in a silo run: folders (RecordIO train.rec / train.idx) of held-out "
                             "identities of the parties' distribution that no party holds")
    parser.add_argument("--far", type=float, default=0.01, help="the FAR of the identity threshold")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-root", help="where the run's data is now (default: the run's data.root)")
    return parser.parse_args(argv)


def audit(args) -> tuple[dict, dict, dict]:
    """The report's head, each attack's result, and the pictures they draw ({file name: draw(path)})."""
    view = open_round(args.run, args.round, args.data_root)
    results, pictures = {}, {}
    for name in args.attack:
        results[name], drawn = ATTACKS[name].run(view, args)
        pictures.update(drawn)
    out = args.out or args.run / f"audit-r{args.round}"
    return {"run": str(args.run), "round": args.round, "out": str(out)}, results, pictures


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        head, results, pictures = audit(args)
    except Refused as refusal:
        print(f"audit: {refusal}", file=sys.stderr)
        return 2
    out = Path(head["out"])
    out.mkdir(parents=True, exist_ok=True)      # only once every attack has run: a refusal writes nothing
    for file_name, draw in pictures.items():
        draw(out / file_name)
    write_report(out, head, results, ATTACKS)
    said = "; ".join(f"{name}: {ATTACKS[name].summary(result)}" for name, result in results.items())
    print(f"audit of {head['run']} round {head['round']}: {said}; report in {head['out']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
