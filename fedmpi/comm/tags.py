"""Every message tag of the run, in one place: two messages that could meet between the same pair of ranks must
not share a tag.

torch.distributed, point to point (gloo matches a pair's messages by tag; NCCL by the order they are issued):
  0     a client's state (the default tag) and the backbone's payloads
  1     a client's upload into its row on the server (crossdevice/exchange.py, every_upload)
  2, 3  a party's class payload up and the server's reply down (silo/classes.py)
  4     a client's DP clusters (crossdevice/album_clusters.py)
MPI control channel (mpi4py):
  7301-7302  the server's control word to a validator and its reply (fv/validator.py)
  7401-7402  the control gather and broadcast (comm/control.py)
  7420-7426  the stages of a secure-aggregation session (core/secure_participant.py, core/secure_exchange.py)
"""
STATE = 0
CLIENT_UPLOAD = 1
CLASS_UP, CLASS_DOWN = 2, 3
CLUSTERS = 4

FV_CONTROL, FV_REPLY = 7301, 7302
GATHER, BCAST = 7401, 7402
SECAGG_KEYS, SECAGG_SETUP, SECAGG_SHARES, SECAGG_ROUTED, SECAGG_MASKED, SECAGG_ASK, SECAGG_UNMASK = range(7420, 7427)
