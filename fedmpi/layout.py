"""`python -m fedmpi.layout [--config F] [key=val ...]`: print the rank layout a config needs, as JSON
(used by the Slurm scripts to size their allocation)."""
from __future__ import annotations

import argparse
import json
import sys

from fedmpi.config import ConfigError, load_config
from fedmpi.comm.topology import build_layout


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedmpi.layout", description=__doc__)
    parser.add_argument("--config", default=None)
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. fed.K=400")
    args = parser.parse_args(argv)
    try:
        layout = build_layout(load_config(args.config, args.overrides))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(layout.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
