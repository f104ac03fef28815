"""Aggregating a round's uploads into the global update."""
