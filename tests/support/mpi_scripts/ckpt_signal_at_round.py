"""`python ckpt_signal_at_round.py --rank R --round N --signal NAME -- [fedmpi.run arguments]`

Runs fedmpi.run; on world rank R (a trainer), the trainer sends itself signal NAME in round N (1-based),
after its local steps and before the round's exchange: a deterministic stand-in for a preemption notice
(USR1, TERM), a crash (KILL) or a rank that stops answering (STOP; a helper sends SIGCONT after --cont-after
seconds) arriving in the middle of a round.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--round", type=int, required=True)
    parser.add_argument("--signal", required=True, choices=("USR1", "TERM", "KILL", "STOP"))
    parser.add_argument("--cont-after", type=float, default=120.0, help="STOP: seconds until SIGCONT")
    parser.add_argument("--stamp", default=None, help="write time.time() here just before the signal")
    parser.add_argument("run_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    run_args = args.run_args[1:] if args.run_args[:1] == ["--"] else args.run_args

    from mpi4py import MPI

    from fedmpi.silo import trainer

    if MPI.COMM_WORLD.Get_rank() == args.rank:
        exchange = trainer.Trainer.exchange
        rounds_seen = []

        def exchange_then_maybe_signal(self, *round_and_trained):
            rounds_seen.append(round_and_trained)
            if len(rounds_seen) == args.round:
                if args.stamp:
                    with open(args.stamp, "w") as f:
                        f.write(repr(time.time()))
                if args.signal == "STOP":
                    subprocess.Popen(["sh", "-c", f"sleep {args.cont_after}; kill -CONT {os.getpid()} 2>/dev/null"],
                                     start_new_session=True, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # mpirun waits for
                    # every holder of a rank's output to close it
                os.kill(os.getpid(), getattr(signal, f"SIG{args.signal}"))
            return exchange(self, *round_and_trained)

        trainer.Trainer.exchange = exchange_then_maybe_signal

    from fedmpi.run import main as run_main

    return run_main(run_args)


if __name__ == "__main__":
    sys.exit(main())
