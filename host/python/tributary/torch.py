# SPDX-License-Identifier: Apache-2.0
"""PyTorch DistributedDataParallel through Tributary (CPU tensors).

    import torch.distributed as dist, tributary.torch
    dist.init_process_group("gloo", ...)          # DDP still needs a process group
    model = torch.nn.parallel.DistributedDataParallel(net)
    state = tributary.torch.hook_state(aggregator="10.0.0.5:17820")
    model.register_comm_hook(state, tributary.torch.allreduce_hook)

Each gradient bucket is all-reduced (averaged) through the aggregator as
soon as DDP hands it over, asynchronously: the hook returns a
torch.futures.Future that a worker thread completes when the all-reduce
is done, so communication overlaps the rest of the backward pass. The
bucket's memory is used in place and registered once (DDP keeps its
buckets across iterations).

This is the path for CPU training. On GPUs, NCCL with
libnccl-net-tributary (docs/NCCL.md) is the path: NCCL_NET_PLUGIN=tributary
and NCCL_COLLNET_ENABLE=1, no hook, no change to the training script.
"""

import random
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist

import tributary

__all__ = ["HookState", "hook_state", "allreduce_hook"]


class HookState:
    """The communicator of one DDP rank and the thread that completes its futures."""

    def __init__(self, communicator, reproducible=False):
        self.communicator = communicator
        self.reproducible = reproducible
        self._waiter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tributary-ddp")

    def close(self):
        self._waiter.shutdown(wait=True)
        self.communicator.close()


def hook_state(process_group=None, job_id=None, job_key=None, reproducible=False, **options):
    """Joins a Tributary job with DDP's ranks: same rank and size as the process group.

    reproducible=True: each bucket is averaged bit-reproducibly (the same bits
    whatever the arrival order, losses or tree; float32/float64 gradients;
    docs/TRAINING.md), so two runs of a seeded training give the same weights.

    Rank 0 draws the job id and key (unless given) and the process group carries
    them to the others. Keywords are Options fields (aggregator="host:port", ...)
    over the TRIBUTARY_* environment. Collective over the process group.
    """
    group = process_group if process_group is not None else dist.group.WORLD
    rank = dist.get_rank(group)
    size = dist.get_world_size(group)
    ids = [job_id, job_key]
    if rank == 0:
        draw = random.SystemRandom()
        ids = [job_id if job_id is not None else draw.randrange(1, 1 << 32),
               job_key if job_key is not None else draw.randrange(1, 1 << 64)]
    dist.broadcast_object_list(ids, src=dist.get_global_rank(group, 0) if group is not
                               dist.group.WORLD else 0, group=group)
    comm = tributary.Communicator(job_id=ids[0], job_key=ids[1], rank=rank, world_size=size,
                                  **options)
    return HookState(comm, reproducible)


def _complete(request, future, tensor):
    try:
        request.wait()
        future.set_result(tensor)
    except Exception as error:  # a tributary.Error: the training step fails with it
        future.set_exception(error)


def _reproducible(communicator, future, tensor):
    try:
        communicator.reproducible_all_reduce(tensor, op="avg")
        future.set_result(tensor)
    except Exception as error:
        future.set_exception(error)


def allreduce_hook(state, bucket):
    """DDP communication hook: the bucket's gradients averaged over the ranks."""
    tensor = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
    future = torch.futures.Future()
    if state.reproducible:
        # Blocking calls in bucket order on the waiter thread: the same
        # collectives in the same order on every rank.
        state._waiter.submit(_reproducible, state.communicator, future, tensor)
        return future
    try:
        request = state.communicator.all_reduce(tensor, op="avg")
    except Exception as error:
        future.set_exception(error)
        return future
    state._waiter.submit(_complete, request, future, tensor)
    return future
