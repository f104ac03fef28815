"""Analysis over run logs and sweep folders: one run's log, finding runs, the sweep index, tables, figures and
the papers' reports. Each command module runs as `python -m fedmpi.analysis.NAME --help`."""
