#!/usr/bin/env python3
"""A `sacct` stand-in for clusters without an accounting database (the tests' one-node Slurm).

Answers the query submitit makes, `sacct -o JobID,State,NodeList --parsable2 -j ID [-j ID ...]`, from
`scontrol show job` (which knows every job younger than MinJobAge) and, for jobs scontrol has forgotten,
from the jobcomp/filetxt file named by JobCompLoc in $SLURM_CONF. Array tasks are named as sacct names
them (`123_4`; pending ones `123_[5-7]`). Output columns follow -o; `--parsable2`/-P gives '|'-separated
fields without a trailing separator, -n/--noheader drops the header.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def scontrol_records(job_id: str) -> list[dict[str, str]]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return []
    return [_fields(line) for line in out.stdout.splitlines() if line.startswith("JobId=")]


def _fields(line: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for item in line.split():
        key, sep, value = item.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def jobcomp_path() -> Path | None:
    conf = os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")
    try:
        lines = Path(conf).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if sep and key.strip().lower() == "jobcomploc":
            return Path(value.strip())
    return None


def jobcomp_record(job_id: str) -> dict[str, str] | None:
    """The last record the jobcomp file holds for a plain job id (a requeued job has several)."""
    path = jobcomp_path()
    if path is None or not path.exists():
        return None
    last = None
    for line in path.read_text(errors="replace").splitlines():
        fields = _fields(line)
        if fields.get("JobId") == job_id:
            last = fields
    return last


def sacct_id(record: dict[str, str]) -> str:
    array_job, task = record.get("ArrayJobId"), record.get("ArrayTaskId")
    if array_job and task:
        if task.isdigit():
            return f"{array_job}_{task}"
        return f"{array_job}_[{task}]"
    return record["JobId"]


def rows_for(job_id: str) -> list[dict[str, str]]:
    records = scontrol_records(job_id)
    if not records and "_" not in job_id:
        last = jobcomp_record(job_id)
        records = [last] if last else []
    rows = []
    for rec in records:
        rows.append({
            "JobID": sacct_id(rec),
            "JobName": rec.get("JobName") or rec.get("Name", ""),
            "State": rec.get("JobState", "UNKNOWN"),
            "NodeList": rec.get("NodeList", "None") if rec.get("NodeList") not in (None, "(null)") else "None",
            "ExitCode": rec.get("ExitCode", "0:0"),
            "Partition": rec.get("Partition", ""),
            "Start": rec.get("StartTime", "Unknown"),
            "End": rec.get("EndTime", "Unknown"),
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sacct", description=__doc__, add_help=True)
    parser.add_argument("-o", "--format", default="JobID,JobName,Partition,State,ExitCode")
    parser.add_argument("-j", "--jobs", action="append", default=[])
    parser.add_argument("-P", "--parsable2", action="store_true")
    parser.add_argument("-p", "--parsable", action="store_true")
    parser.add_argument("-n", "--noheader", action="store_true")
    parser.add_argument("-X", "--allocations", action="store_true")
    args, _unknown = parser.parse_known_args(argv)
    columns = [c.strip() for c in args.format.split(",") if c.strip()]
    job_ids = [j for spec in args.jobs for j in spec.split(",") if j]
    known = {"JobID", "JobName", "State", "NodeList", "ExitCode", "Partition", "Start", "End"}
    unknown = [c for c in columns if c not in known]
    if unknown:
        print(f"sacct (stand-in): unsupported field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}",
              file=sys.stderr)
        return 1
    rows = [row for job_id in job_ids for row in rows_for(job_id)]
    sep = "|"
    lines = [] if args.noheader else [sep.join(columns)]
    for row in rows:
        lines.append(sep.join(row[c] for c in columns))
    trailer = sep if args.parsable and not args.parsable2 else ""
    print("\n".join(line + trailer for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
