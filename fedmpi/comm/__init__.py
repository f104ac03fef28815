"""The MPI floor: the rendezvous (rendezvous.py), process groups (groups.py), control messages with a deadline
(control.py: receive, send, gather, bcast, barrier, allreduce_max over mpi4py), tensor point-to-point (p2p.py), node
discovery (nodes.py), one copy per node (node_share.py) and the failure discipline (failures.py). torch is
imported by the functions that use it: fedmpi.run passes through here before it accepts a launch. Nothing here
imports fedmpi above this package."""
from fedmpi.comm.control import (CommFailure, CommTimeout, allreduce_max, barrier, bcast, gather, receive,  # noqa: F401
                                 send)
from fedmpi.comm.failures import DeviceOutOfMemory, naming_failures, run_guarded  # noqa: F401
from fedmpi.comm.groups import group_backend, group_label, new_group  # noqa: F401
from fedmpi.comm.nodes import describe_ranks, local_rank, mpi_interface, rendezvous_host, use_mpi_interface  # noqa: F401
from fedmpi.comm.rendezvous import (_STATE, backend, collective_timeout_s, device, gpu_identity,  # noqa: F401
                                    init_torch_distributed, mpi_comm, nccl_reports_errors, shutdown)
