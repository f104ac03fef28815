"""The differences between two JSON files of the harness (rule_losses.py, device_losses.py, config_digest.py), one
line per differing leaf: its path and both values (cut to 100 characters). Exit status 1 when they differ.

usage: python tests/support/harness_diff.py BEFORE.json AFTER.json"""
from __future__ import annotations

import json
import sys

MISSING = "<absent>"


def leaves(tree, path: str = ""):
    """{path: value} of every leaf of a JSON tree (lists and dicts walked)."""
    if isinstance(tree, dict):
        return {k: v for key, item in tree.items() for k, v in leaves(item, f"{path}/{key}").items()}
    if isinstance(tree, list):
        return {k: v for i, item in enumerate(tree) for k, v in leaves(item, f"{path}[{i}]").items()}
    return {path: tree}


def differences(before, after) -> list[str]:
    a, b = leaves(before), leaves(after)
    return [f"{path}: {str(a.get(path, MISSING))[:100]!r} -> {str(b.get(path, MISSING))[:100]!r}"
            for path in sorted(a.keys() | b.keys()) if a.get(path, MISSING) != b.get(path, MISSING)]


def main(before: str, after: str) -> int:
    lines = differences(*(json.loads(open(p).read()) for p in (before, after)))
    print("\n".join(lines) or f"identical: {before} and {after}")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
