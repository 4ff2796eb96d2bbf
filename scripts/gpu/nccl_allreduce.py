# SPDX-License-Identifier: Apache-2.0
"""One rank of an all-reduce sweep through torch.distributed, for
scripts/gpu-check.sh: exact results and the time per all-reduce at every
size from MIN_BYTES to MAX_BYTES (doubling), float32 sum.

Each rank fills its buffer with small integers that depend on the rank and
the index (so every sum is exact in float32 and a misplaced element shows),
poisons nothing it does not overwrite, all-reduces, and compares every
element with the exact sum. Timing: warm-up, then ITERS all-reduces between
CUDA events (or a host clock with --device cpu), median of ROUNDS. Rank 0
writes one JSON line per size to --out.

Environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun's), and
whatever NCCL_* / TRIBUTARY_* the caller sets.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def pattern(n, rank, device):
    i = torch.arange(n, device=device, dtype=torch.int64)
    return ((i * 7 + rank * 3) % 13 - 6).to(torch.float32)


def expected(n, world, device):
    total = torch.zeros(n, device=device, dtype=torch.float32)
    for r in range(world):
        total += pattern(n, r, device)
    return total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="nccl")
    p.add_argument("--device", default="cuda")
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=0.3,
                   help="aim for this much timed work per size and round")
    p.add_argument("--label", default="")
    p.add_argument("--out", required=True)
    a = p.parse_args()

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if a.device == "cuda":
        torch.cuda.set_device(0)  # every rank on the one GPU: NCCL_HOSTID makes them "nodes"
        device = torch.device("cuda", 0)
    else:
        device = torch.device("cpu")
    dist.init_process_group(a.backend, rank=rank, world_size=world)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def timed(buf, iters):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                dist.all_reduce(buf)
            stop.record()
            stop.synchronize()
            return start.elapsed_time(stop) * 1000.0 / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        return (time.perf_counter() - t0) * 1e6 / iters

    # Rank 0 writes each size's row as soon as it is timed, so a sweep cut
    # short by its timeout still reports every size it finished.
    out = open(a.out, "w") if rank == 0 else None
    failures = 0
    nbytes = a.min_bytes
    while nbytes <= a.max_bytes:
        n = max(1, nbytes // 4)
        buf = pattern(n, rank, device)
        dist.all_reduce(buf)
        sync()
        want = expected(n, world, device)
        wrong = int((buf != want).sum().item())
        if wrong:
            failures += 1
            first = int((buf != want).nonzero()[0].item())
            print(f"rank {rank}: {nbytes} bytes: {wrong} wrong elements, first at {first}: "
                  f"{buf[first].item()} != {want[first].item()}", file=sys.stderr)
        # One untimed all-reduce sizes the iterations to the budget.
        t_one = timed(buf, 1)
        # At most 100: the buffer is summed into itself, and 12 x 2^100
        # stays a finite float32 (values must not be zeros nor infinities).
        iters = int(max(1, min(100, a.budget_s * 1e6 / max(t_one, 1.0))))
        # Every rank must run the same number of iterations: rank 0 decides.
        it = torch.tensor([iters], device=device, dtype=torch.int64)
        dist.broadcast(it, 0)
        iters = int(it.item())
        times = []
        for _ in range(a.rounds):
            buf.copy_(pattern(n, rank, device))
            sync()
            times.append(timed(buf, iters))
        us = statistics.median(times)
        # busbw as nccl-tests computes it for all-reduce: 2(n-1)/n x bytes / time.
        busbw = 2.0 * (world - 1) / world * nbytes / us / 1e3 if us > 0 else 0.0
        row = {"label": a.label, "bytes": nbytes, "us": round(us, 2),
               "busbw_GBps": round(busbw, 3), "iters": iters, "rounds": a.rounds,
               "wrong": wrong}
        print(f"sweep {a.label}: {json.dumps(row)}", flush=True)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()
        nbytes *= 2
    dist.barrier()
    if out:
        out.close()
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
