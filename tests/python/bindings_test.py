#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The Python bindings (host/python) against a real tributaryd on loopback.
# Proves: NumPy arrays and CPU torch tensors (float32, int64, bfloat16) are
# all-reduced exactly in place and between two buffers, without copies (the
# result lands in the caller's own array); every operation; the
# bit-reproducible all-reduce (float32 sum within rounding of the exact sum,
# float64 average); registrations are
# made once and reused; every failure raises tributary.Error with the status
# name in `code` (an unreachable aggregator, mismatched types, a read-only
# or non-contiguous buffer, too many elements, an unknown operation or
# option, a closed communicator, a list or scalar NumPy would copy, a
# non-native byte order); views of a registered array share its
# registration; Request.test() and wait(timeout).
# Usage: bindings_test.py (TRIBUTARYD and PYTHONPATH from ctest).
import gc
import mmap
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest
import weakref

import numpy as np
import torch

import tributary

RANKS = 3


def start_daemon():
    log = tempfile.NamedTemporaryFile(prefix="trib-pytest-", suffix=".log", delete=False)
    proc = subprocess.Popen([os.environ["TRIBUTARYD"], "--listen-address", "127.0.0.1",
                             "--port", "0"], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(400):
        found = re.search(r"tributaryd listening on (\S+)", open(log.name).read())
        if found:
            return proc, found.group(1), log.name
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("tributaryd did not start: " + open(log.name).read())


def run_rank(check, options, rank, address, job, results):
    """One rank: opens its communicator (with `options` beyond the job's
    and the daemon's), runs check(comm, rank) and puts None or the failure."""
    try:
        with tributary.Communicator(job_id=job, job_key=0x5eed, rank=rank, world_size=RANKS,
                                    aggregator=address, node_level="off", **options) as comm:
            check(comm, rank)
        results.put(None)
    except Exception:
        results.put("rank %d: %s" % (rank, traceback.format_exc()))


def check_collectives(comm, rank):
    """The collective checks of one rank."""
    assert comm.rank == rank and comm.world_size == RANKS
    # NumPy float32, out of place: the result is in our own array.
    x = np.arange(1000, dtype=np.float32) * (rank + 1)
    out = np.full_like(x, -1)
    comm.all_reduce(x, out).wait()
    np.testing.assert_array_equal(out, np.arange(1000, dtype=np.float32) * 6)
    np.testing.assert_array_equal(x, np.arange(1000, dtype=np.float32) * (rank + 1))
    # In place, int64, every operation.
    for op, expected in (("sum", 6), ("max", 3), ("min", 1), ("prod", 6)):
        y = np.full(300, rank + 1, dtype=np.int64)
        comm.all_reduce(y, op=op).wait()
        assert (y == expected).all(), (op, y[:4])
    z = np.full(8, float(rank), dtype=np.float64)
    comm.all_reduce(z, op="avg").wait()
    assert (z == 1.0).all(), z
    # torch: float32 and bfloat16 tensors, in place, memory unchanged.
    t = torch.full((4096,), float(rank + 1))
    ptr = t.data_ptr()
    request = comm.all_reduce(t)
    request.wait(timeout_s=30)
    assert t.data_ptr() == ptr and torch.equal(t, torch.full((4096,), 6.0)), t[:4]
    b = torch.full((64,), 0.5 * (rank + 1), dtype=torch.bfloat16)
    comm.all_reduce(b).wait()
    assert torch.equal(b, torch.full((64,), 3.0, dtype=torch.bfloat16)), b[:4]
    # A registration is made once: the same array again reuses it.
    first = comm.register(x)
    assert comm.register(x).id == first.id
    # test() polls.
    w = np.ones(16, dtype=np.float32)
    r = comm.all_reduce(w)
    while not r.test():
        time.sleep(0.001)
    assert (w == 3).all()
    # Bit-reproducible: float32 sum and float64 average, in place.
    def inputs(k):
        rng = np.random.default_rng(k)
        return (rng.standard_normal(5000) * 10.0 ** rng.uniform(-3, 3, 5000)).astype(
            np.float32)
    r32 = inputs(rank)
    exact = sum(inputs(k).astype(np.float64) for k in range(RANKS))
    comm.reproducible_all_reduce(r32)
    assert np.allclose(r32, exact, rtol=1e-6, atol=1e-6), np.abs(r32 - exact).max()
    r64 = np.full(300, float(rank), dtype=np.float64)
    comm.reproducible_all_reduce(r64, op="avg")
    assert (r64 == 1.0).all(), r64[:4]
    stats = comm.stats()
    assert stats["transport"] == "udp" and stats["collectives_completed"] >= 13, stats


def check_block_sparse(comm, rank):
    """A block-sparse all-reduce: each rank has data in one fragment of 8."""
    assert comm.options.block_sparse
    x = np.zeros(256 * 8, dtype=np.float32)  # 8 fragments of 1 KiB
    x[256 * rank:256 * (rank + 1)] = rank + 1
    out = np.full_like(x, -1)
    comm.all_reduce(x, out).wait()
    want = np.zeros_like(x)
    for r in range(RANKS):
        want[256 * r:256 * (r + 1)] = r + 1
    np.testing.assert_array_equal(out, want)
    assert comm.stats()["zero_fragments"] == 7, comm.stats()


def check_reproducible(comm, rank):
    """reproducible=True: a float32 sum completes in the call, exactly."""
    assert comm.options.reproducible
    x = np.full(5000, 0.25 * (rank + 1), dtype=np.float32)
    out = np.zeros_like(x)
    request = comm.all_reduce(x, out)
    assert request.test(), "the reproducible all-reduce returned before completing"
    np.testing.assert_array_equal(out, np.full_like(x, 0.25 * 6))


class BindingsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon, cls.address, cls.log = start_daemon()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.terminate()
        cls.daemon.wait(30)
        os.unlink(cls.log)

    def run_ranks(self, check, job, **options):
        """Runs check(comm, rank) on a communicator with `options` in each of
        RANKS spawned processes."""
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        procs = [ctx.Process(target=run_rank, args=(check, options, r, self.address, job, results))
                 for r in range(RANKS)]
        for p in procs:
            p.start()
        failures = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(30)
        self.assertEqual([f for f in failures if f], [])
        self.assertEqual([p.exitcode for p in procs], [0] * RANKS)

    def test_collectives_across_ranks(self):
        self.run_ranks(check_collectives, 4242)

    def assertError(self, code, fn, *args, **kwargs):
        with self.assertRaises(tributary.Error) as raised:
            fn(*args, **kwargs)
        self.assertEqual(raised.exception.code, code, str(raised.exception))
        self.assertTrue(str(raised.exception).startswith(code + ":"), str(raised.exception))
        return raised.exception

    def test_block_sparse_all_reduce(self):
        """block_sparse=True: zero fragments are declared, results exact."""
        self.run_ranks(check_block_sparse, 4343, payload_bytes=1024, block_sparse=True)

    def test_reproducible_option(self):
        self.run_ranks(check_reproducible, 4444, reproducible=True)

    def test_errors_carry_the_status_name(self):
        e = self.assertError("UNAVAILABLE", tributary.Communicator, job_id=1, job_key=2, rank=0,
                             world_size=1, aggregator="127.0.0.1:9", connect_timeout_ms=300)
        self.assertIn("127.0.0.1:9", e.message)
        self.assertError("INVALID_ARGUMENT", tributary.Communicator, job_id=1, job_key=2,
                         rank=0, world_size=1, aggregator="127.0.0.1:99999")
        self.assertError("INVALID_ARGUMENT", tributary.Communicator, job_id=1, job_key=2,
                         rank=0, world_size=1, windoww=4)
        comm = tributary.Communicator(job_id=77, job_key=3, rank=0, world_size=1,
                                      aggregator=self.address, node_level="off")
        a = np.zeros(8, dtype=np.float32)
        self.assertError("INVALID_ARGUMENT", comm.all_reduce, a, np.zeros(8, dtype=np.int32))
        self.assertError("INVALID_ARGUMENT", comm.all_reduce, a, op="mean")
        self.assertError("INVALID_ARGUMENT", comm.all_reduce, a, count=9)
        self.assertError("INVALID_ARGUMENT", comm.all_reduce, np.zeros((4, 4), np.float32)[:, 1])
        frozen = np.zeros(8, dtype=np.float32)
        frozen.flags.writeable = False
        self.assertError("INVALID_ARGUMENT", comm.all_reduce, frozen)
        self.assertError("INVALID_ARGUMENT", comm.all_reduce, torch.zeros(4, 4).t())
        self.assertError("INVALID_ARGUMENT", comm.all_reduce, np.zeros(4, dtype=np.complex64))
        comm.all_reduce(a).wait()  # a one-rank job works: its own sum
        comm.close()
        self.assertError("FAILED_PRECONDITION", comm.all_reduce, a)

    def test_memory_that_is_not_the_callers_own_is_refused_and_views_share(self):
        comm = tributary.Communicator(job_id=78, job_key=3, rank=0, world_size=1,
                                      aggregator=self.address, node_level="off")
        a = np.zeros(8, dtype=np.float32)
        # A copy NumPy would make (freed on return, written by the library).
        for not_own in ([1.0, 2.0], (1.0, 2.0), 3.0):
            e = self.assertError("INVALID_ARGUMENT", comm.all_reduce, not_own)
            self.assertIn("not memory of its own", e.message)
        self.assertError("INVALID_ARGUMENT", comm.all_reduce, a, [0.0] * 8)
        # Non-native byte order would be reduced as native.
        e = self.assertError("INVALID_ARGUMENT", comm.all_reduce, np.ones(8, ">f4"))
        self.assertIn("byte order", e.message)
        # A Parameter is a tensor (its module is torch.nn.parameter).
        e = self.assertError("INVALID_ARGUMENT", comm.all_reduce,
                             torch.nn.Parameter(torch.zeros(4, 4)).t())
        self.assertIn("non-contiguous tensor", e.message)
        # Views of a registered array use its registration, several in flight.
        v = np.arange(16, dtype=np.float32)
        comm.register(v)
        first = comm.all_reduce(v[:4], v[4:8])
        second = comm.all_reduce(v[8:12], v[12:])
        first.wait()
        second.wait()
        np.testing.assert_array_equal(v, np.array([0, 1, 2, 3] * 2 + [8, 9, 10, 11] * 2,
                                                  dtype=np.float32))
        self.assertEqual(len(comm._registered), 1)
        # wait() without a limit, however it is spelt; NaN is refused.
        comm.all_reduce(a).wait(timeout_s=float("inf"))
        comm.all_reduce(a).wait(timeout_s=1e300)
        self.assertError("INVALID_ARGUMENT", comm.all_reduce(a).wait, timeout_s=float("nan"))
        comm.close()

    def test_objects_all_reduced_without_register_are_released_with_their_memory(self):
        comm = tributary.Communicator(job_id=80, job_key=3, rank=0, world_size=1,
                                      aggregator=self.address, node_level="off")
        kept = np.ones(64, dtype=np.float32)
        comm.register(kept)
        # Fresh arrays and tensors each step, as a training loop makes them:
        # each goes, with its registration, once the caller drops it.
        for i in range(40):
            fresh = (np.full(1000 + i, 1.0, dtype=np.float32) if i % 2
                     else torch.full((1000 + i,), 1.0))
            out = np.zeros(1000 + i, dtype=np.float32)
            alive = weakref.ref(fresh), weakref.ref(out)
            comm.all_reduce(fresh, out).wait()
            self.assertEqual(float(out[-1]), 1.0)
            del fresh, out
            self.assertEqual([a() is None for a in alive], [True, True],
                             "the communicator keeps an array it all-reduced alive")
            self.assertEqual(list(comm._registered), [(kept.ctypes.data, kept.nbytes)])
        # A view keeps its base (and the base's registration) alive; the
        # registration goes with the last of them.
        base = np.ones(32, dtype=np.float32)
        view = base[8:]
        comm.all_reduce(base).wait()
        comm.all_reduce(view).wait()
        gone = weakref.ref(base)
        del base
        self.assertEqual(len(comm._registered), 2)
        del view
        self.assertIsNone(gone())
        self.assertEqual(len(comm._registered), 1)
        # Views made per call (a slice each step) use the registration of
        # the array they show, which lives as long as it does: one
        # registration, not one per call.
        flat = np.ones(1024, dtype=np.float32)
        ids = set()
        for _ in range(5):
            comm.all_reduce(flat[:512]).wait()
            ids |= {b.id for b, _ in comm._registered.values()}
        self.assertEqual(len(ids), 2, "kept, and one for the slices")
        # A window sliding over the array: each new range replaces the ones
        # it overlaps that no operation uses (they do not pile up while the
        # array lives).
        for start in range(0, 512, 32):
            comm.all_reduce(flat[start:start + 256]).wait()
        self.assertEqual(len(comm._registered), 2, "kept, and the last window")
        del flat
        self.assertEqual(len(comm._registered), 1)
        # A registration whose tensor was given other memory (set_) serves
        # nothing more: that memory may be freed and reused. (A NumPy array
        # cannot move while weakly referenced: resize refuses.)
        x = torch.ones(4096)
        comm.all_reduce(x[:1024]).wait()
        first = comm._registered[(x.data_ptr(), 4096)][0].id
        y = x[:1024]
        x.set_(torch.ones(8))
        comm.all_reduce(y).wait()
        self.assertNotEqual(comm._registered[(y.data_ptr(), 4096)][0].id, first)
        del x, y
        # register() keeps its object, also one an operation registered first.
        later = np.ones(16, dtype=np.float32)
        comm.all_reduce(later).wait()
        comm.register(later)
        held = weakref.ref(later)
        del later
        self.assertIsNotNone(held(), "register() must keep its object alive")
        comm.deregister(held())
        comm.close()
        self.assertIsNone(held())

    def test_a_request_dropped_before_it_is_done_keeps_its_buffers_alive(self):
        # Rank 1 never contributes, so rank 0's all-reduce cannot finish: its
        # array must outlive the Request the caller dropped (the library
        # still writes into it), and go once closing ended the operation.
        comms = [None, None]

        def create(r):
            comms[r] = tributary.Communicator(job_id=81, job_key=5, rank=r, world_size=2,
                                              aggregator=self.address, node_level="off")

        creators = [threading.Thread(target=create, args=(r,)) for r in range(2)]
        for t in creators:
            t.start()
        for t in creators:
            t.join(timeout=60)
        x = np.ones(4096, dtype=np.float32)
        alive = weakref.ref(x)
        request = comms[0].all_reduce(x)
        del x, request
        self.assertIsNotNone(alive(), "an array freed while its all-reduce runs")
        # A buffer-protocol object stays exported while its operation runs: a
        # bytearray cannot be resized (moved) nor an mmap closed under it.
        raw = bytearray(4096)
        pending = comms[0].all_reduce(raw)
        with self.assertRaises(BufferError):
            raw.extend(b"more")
        mapped = mmap.mmap(-1, 4096)
        dropped = comms[0].all_reduce(np.frombuffer(mapped, dtype=np.uint8))
        del dropped
        gc.collect()
        with self.assertRaises(BufferError):
            mapped.close()
        comms[0].close()
        self.assertIsNone(alive(), "closing ended the operation: its array can go")
        with self.assertRaises(tributary.Error):  # closing failed it
            pending.wait()
        raw.extend(b"more")  # the operation ended: the bytearray is its own again
        mapped.close()
        comms[1].close()

    def test_ranks_that_are_threads_of_one_process_meet_in_collective_calls(self):
        # Creating a communicator and a reproducible all-reduce's set-up are
        # collective: each releases the GIL while it waits for the others.
        results = [None, None]

        def rank(r):
            try:
                with tributary.Communicator(job_id=79, job_key=5, rank=r, world_size=2,
                                            aggregator=self.address, node_level="off",
                                            op_timeout_ms=20000) as comm:
                    x = np.full(8, r + 1, dtype=np.float32)
                    comm.reproducible_all_reduce(x)
                    results[r] = x.tolist()
            except tributary.Error as e:
                results[r] = str(e)

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(results, [[3.0] * 8, [3.0] * 8])

    def test_close_while_another_thread_waits_in_a_call_fails_that_call_cleanly(self):
        # Rank 0's reproducible all-reduce waits (GIL released) for rank 1,
        # which never calls; rank 0's communicator is closed meanwhile from
        # this thread. The call fails with an error; the communicator was
        # not destroyed under it (a use after free before).
        comms = [None, None]
        ready = threading.Barrier(3)

        def create(r):
            comms[r] = tributary.Communicator(job_id=80, job_key=5, rank=r, world_size=2,
                                              aggregator=self.address, node_level="off",
                                              op_timeout_ms=3000)
            ready.wait()

        creators = [threading.Thread(target=create, args=(r,)) for r in range(2)]
        for t in creators:
            t.start()
        ready.wait(timeout=60)
        outcome = []

        def waiter():
            try:
                comms[0].reproducible_all_reduce(np.ones(8, dtype=np.float32))
                outcome.append("completed")
            except tributary.Error as e:
                outcome.append(e.code)

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.5)
        comms[0].close()  # returns at once; the job is left when the call returns
        t.join(timeout=60)
        self.assertFalse(t.is_alive())
        self.assertEqual(len(outcome), 1)
        self.assertNotEqual(outcome[0], "completed")
        self.assertError("FAILED_PRECONDITION", comms[0].all_reduce, np.ones(8, np.float32))
        comms[1].close()
        for c in creators:
            c.join()


if __name__ == "__main__":
    unittest.main(verbosity=2)
