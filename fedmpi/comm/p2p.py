"""Point-to-point sends and receives of tensors that may live on a GPU, each legal for its group's backend.
NCCL takes CUDA tensors (and matches a pair's sends and receives in the order they are issued, not by tag).
gloo's send and recv hand the tensor's data pointer to its TCP transport, which reads and writes host memory
only (torch.distributed's backend table: gloo send/recv on CPU tensors only; its all-reduce and broadcast stage
CUDA tensors themselves, its point-to-point does not). A CUDA tensor on a gloo group (ranks that share a GPU,
comm.group_backend) therefore travels through a host copy in page-locked memory, made here."""
from __future__ import annotations

import torch
import torch.distributed as dist


def staged(tensor: torch.Tensor, group) -> bool:
    """Whether `tensor` must go through host memory on `group` (a device tensor on a gloo group)."""
    return tensor.device.type != "cpu" and dist.get_backend(group) == "gloo"


def _host_copy_of(tensor: torch.Tensor) -> torch.Tensor:
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    return host.copy_(tensor)


def _host_like(tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)


class StagedSend:
    """A send of a host copy: keeps the copy alive until the send is done."""

    def __init__(self, work, host: torch.Tensor):
        self.work, self.host = work, host

    def is_completed(self) -> bool:
        return self.work.is_completed()

    def wait(self) -> bool:
        self.work.wait()
        self.host = None
        return True


class StagedReceive:
    """A receive into a host buffer, copied into the device tensor by `wait()`."""

    def __init__(self, work, host: torch.Tensor, into: torch.Tensor):
        self.work, self.host, self.into = work, host, into

    def is_completed(self) -> bool:
        return self.work.is_completed()

    def wait(self) -> bool:
        self.work.wait()
        if self.host is not None:
            self.into.copy_(self.host)
            self.host = None
        return True


def isend(tensor: torch.Tensor, dst: int, group, tag: int = 0):
    if staged(tensor, group):
        host = _host_copy_of(tensor)
        return StagedSend(dist.isend(host, dst=dst, group=group, tag=tag), host)
    return dist.isend(tensor, dst=dst, group=group, tag=tag)


def irecv(tensor: torch.Tensor, src: int, group, tag: int = 0):
    if staged(tensor, group):
        host = _host_like(tensor)
        if tensor.numel():    # the last element, where a shorter message leaves message_end.py's mark
            host.reshape(-1)[-1:].copy_(tensor.reshape(-1)[-1:])
        return StagedReceive(dist.irecv(host, src=src, group=group, tag=tag), host, tensor)
    return dist.irecv(tensor, src=src, group=group, tag=tag)


def send(tensor: torch.Tensor, dst: int, group, tag: int = 0) -> None:
    dist.send(_host_copy_of(tensor) if staged(tensor, group) else tensor, dst=dst, group=group, tag=tag)


def recv(tensor: torch.Tensor, src: int, group, tag: int = 0) -> None:
    irecv(tensor, src, group, tag).wait()
