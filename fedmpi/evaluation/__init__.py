"""Evaluation both settings share: the held-out pair sets' log row and evaluation line (held_out.py) and the
large-scale benchmarks of eval.sets (benchmarks.py). The silo runs them as side work beside its validators
(silo/evaluation.py), the face clients across devices on the server (crossdevice/face_evaluation.py); neither
setting imports the other."""
