"""Memory before a run starts: what each rank of a layout will need at its peak (model.py), what each node has
(available.py), and the launch check that refuses a layout that cannot fit (check.py, `run.memory_check`).
No torch here on CPU nodes: the check runs before any rank imports it. bench/memory.py measures what model.py
estimates."""
