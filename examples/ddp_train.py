#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Train a small model with PyTorch DDP over Tributary and over Gloo; compare.

Starts a tributaryd on loopback (or uses --aggregator), then trains the same
model on the same synthetic data twice with --ranks processes: once with
DDP's own all-reduce over Gloo, once with tributary.torch.allreduce_hook
(every gradient bucket averaged by the aggregator). Prints the loss curve of
both, the largest difference between them, the mean step time of each, and
exits 1 if the two runs differ by more than float rounding explains
(--tolerance on every loss and on every final parameter).

    PYTHONPATH=build/python python3 examples/ddp_train.py --ranks 4 --steps 100

The data is made by the script (a fixed random teacher network labels
Gaussian inputs): each rank draws its own batches. The model: an MLP
(64 -> 256 -> 256 -> 10) or with --conv a small CNN on 1x16x16 inputs.
"""

import argparse
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(conv):
    torch.manual_seed(0)  # the same initial weights on every rank and in both runs
    if conv:
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(32 * 4 * 4, 10))
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def batches(rank, steps, batch, conv):
    """The rank's batches: inputs, and labels from a fixed teacher network."""
    teacher_gen = torch.Generator().manual_seed(12345)
    features = 256 if conv else 64
    teacher = torch.randn(features, 10, generator=teacher_gen)
    gen = torch.Generator().manual_seed(1000 + rank)
    for _ in range(steps):
        x = torch.randn(batch, features, generator=gen)
        y = (x @ teacher).argmax(dim=1)
        yield (x.view(batch, 1, 16, 16) if conv else x), y


def worker(rank, args, backend, port, results, jitter=0):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=args.ranks)
    model = nn.parallel.DistributedDataParallel(make_model(args.conv))
    state = None
    if backend == "tributary":
        import tributary.torch
        # node_level off: every bucket goes through the aggregator (on one
        # machine the node level would reduce in shared memory instead).
        state = tributary.torch.hook_state(aggregator=args.aggregator, node_level="off",
                                           aggregator_key=args.aggregator_key or "",
                                           reproducible=args.reproducible)
        model.register_comm_hook(state, tributary.torch.allreduce_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    losses, times = [], []
    delays = random.Random(jitter * 100 + rank)
    for x, y in batches(rank, args.steps, args.batch, args.conv):
        if jitter:  # ranks reach each step's all-reduces in another order
            time.sleep(delays.uniform(0, jitter) / 1000)
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()  # DDP all-reduces the gradient buckets here
        optimizer.step()
        times.append(time.perf_counter() - start)
        # The job's loss: every rank's, averaged (over Gloo in both runs).
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / args.ranks)
    # Plain floats: a tensor would travel as shared memory of a process that exits.
    params = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    stats = state.communicator.stats() if state is not None else {}
    if rank == 0:
        results.put((losses, times, params, stats))
    if state is not None:
        state.close()
    dist.destroy_process_group()


def run(args, backend, jitter=0):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, backend, port, results, jitter))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    # Rank 0's results first: it cannot exit before they are read (a pipe).
    outcome = None
    deadline = time.monotonic() + args.timeout_s
    while outcome is None and time.monotonic() < deadline:
        try:
            outcome = results.get(timeout=1)
        except Exception:  # queue.Empty: still training, unless every rank is gone
            if all(p.exitcode is not None for p in procs):
                break
    for p in procs:
        p.join(max(1, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
    if outcome is None or any(p.exitcode != 0 for p in procs):
        sys.exit("ddp_train: the %s run failed (exit codes %s)"
                 % (backend, [p.exitcode for p in procs]))
    return outcome


def start_daemon(binary):
    log = tempfile.NamedTemporaryFile(prefix="tributaryd-", suffix=".log", delete=False)
    daemon = subprocess.Popen([binary, "--listen-address", "127.0.0.1", "--port", "0"],
                              stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        text = open(log.name).read()
        address = re.search(r"tributaryd listening on (\S+)", text)
        key = re.search(r"tributaryd public key ([0-9a-f]{64})", text)
        if address and key:
            return daemon, address.group(1), key.group(1), log.name
        if daemon.poll() is not None:
            break
        time.sleep(0.05)
    daemon.kill()
    sys.exit("ddp_train: tributaryd did not start:\n" + open(log.name).read())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--conv", action="store_true", help="a small CNN instead of the MLP")
    parser.add_argument("--aggregator", help="HOST:PORT of a running tributaryd")
    parser.add_argument("--aggregator-key", help="its public key (pins it)")
    parser.add_argument("--tributaryd", default=os.environ.get("TRIBUTARYD", "tributaryd"),
                        help="daemon to start when --aggregator is not given")
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="largest difference allowed between the runs' losses and weights")
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument("--reproducible", action="store_true",
                        help="bit-reproducible all-reduces: the Tributary run is made twice, the "
                             "second with random delays per rank and step, and must give the "
                             "same weights bit for bit")
    args = parser.parse_args()

    daemon = None
    if not args.aggregator:
        daemon, args.aggregator, args.aggregator_key, log = start_daemon(args.tributaryd)
        print("# tributaryd on %s (log %s)" % (args.aggregator, log))
    try:
        gloo = run(args, "gloo")
        trib = run(args, "tributary")
        again = run(args, "tributary", jitter=10) if args.reproducible else None
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(10)
    if daemon is not None:
        os.unlink(log)

    (g_loss, g_time, g_params, _), (t_loss, t_time, t_params, stats) = gloo, trib
    warm = min(5, args.steps - 1)
    g_step = sum(g_time[warm:]) / len(g_time[warm:]) * 1e3
    t_step = sum(t_time[warm:]) / len(t_time[warm:]) * 1e3
    print("# %d ranks, %d steps of %d samples each, %s, SGD lr %g momentum 0.9"
          % (args.ranks, args.steps, args.batch, "CNN" if args.conv else "MLP", args.lr))
    print("%6s  %12s  %12s  %10s" % ("step", "loss gloo", "loss trib", "|diff|"))
    shown = sorted(set([0, args.steps - 1] + list(range(0, args.steps, max(1, args.steps // 10)))))
    for i in shown:
        print("%6d  %12.6f  %12.6f  %10.2e" % (i, g_loss[i], t_loss[i], abs(g_loss[i] - t_loss[i])))
    loss_diff = max(abs(a - b) for a, b in zip(g_loss, t_loss))
    param_diff = max(abs(a - b) for a, b in zip(g_params, t_params))
    print("# largest loss difference %.2e, largest weight difference %.2e (tolerance %g)"
          % (loss_diff, param_diff, args.tolerance))
    print("# mean step time after %d warm-up steps: gloo %.2f ms, tributary %.2f ms"
          % (warm, g_step, t_step))
    print("# loss %.4f -> %.4f (gloo), %.4f -> %.4f (tributary)"
          % (g_loss[0], g_loss[-1], t_loss[0], t_loss[-1]))
    print("# tributary: rank 0 completed %d all-reduces (gradient buckets) through the aggregator "
          "over %s, %d fragments sent, %d retransmitted"
          % (stats.get("collectives_completed", 0), stats.get("transport", "?"),
             stats.get("fragments_sent", 0), stats.get("retransmissions", 0)))
    if stats.get("collectives_completed", 0) < args.steps:
        print("NOT THROUGH TRIBUTARY: fewer all-reduces than steps", file=sys.stderr)
        return 1
    if again is not None:
        same = again[2] == t_params and again[0] == t_loss
        print("# reproducible: a second run with ranks delayed at random gave %s"
              % ("the same weights and losses, bit for bit" if same else "OTHER weights"))
        if not same:
            print("NOT REPRODUCIBLE", file=sys.stderr)
            return 1
    if loss_diff > args.tolerance or param_diff > args.tolerance:
        print("DIVERGED: the runs differ beyond float rounding", file=sys.stderr)
        return 1
    if not t_loss[-1] < t_loss[0]:
        print("NOT LEARNING: the loss did not fall", file=sys.stderr)
        return 1
    print("VERDICT: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
