# SPDX-License-Identifier: Apache-2.0
"""Tributary: in-network all-reduce, from Python.

The bindings of libtributary's public API (host/include/tributary/): a
Communicator joins a job at an aggregator (tributaryd) and all-reduces
NumPy arrays, CPU torch tensors or any contiguous buffer in place or
between two buffers, without copies: the library works on the objects'
own memory, registered on first use. An object passed to register() is
kept alive and registered until deregister() or close(); one an operation
registered on its own stays registered while it lives (its memory is
released with it; objects that take no weak reference, like bytearray,
are kept until deregister() or close()). Operations are asynchronous: each
returns a Request to wait() on (the GIL is released while it waits).
Every failure raises tributary.Error, whose ``code`` is the status name
("UNAVAILABLE", "TIMED_OUT", ...).

    import numpy as np, tributary
    comm = tributary.Communicator(job_id=7, job_key=0x1234, rank=r, world_size=n,
                                  aggregator="10.0.0.5:17820")
    grad = np.ones(1 << 20, dtype=np.float32)
    comm.all_reduce(grad, op="sum").wait()      # in place

Options not given as keywords come from the TRIBUTARY_* environment
(docs/CONFIGURATION.md). tributary.torch has the DDP communication hook.
"""

import sys
import threading
import weakref

from . import _tributary
from ._tributary import CommConfig, DataType, Error, Options, ReduceOp, dtype_size

__all__ = ["Communicator", "Request", "Error", "Options", "CommConfig", "DataType", "ReduceOp",
           "dtype_size", "version"]


def version():
    """libtributary's version, "MAJOR.MINOR.PATCH"."""
    return _tributary.version()


_NUMPY_TYPES = {
    "int8": DataType.int8, "uint8": DataType.uint8, "int32": DataType.int32,
    "uint32": DataType.uint32, "int64": DataType.int64, "uint64": DataType.uint64,
    "float16": DataType.float16, "float32": DataType.float32, "float64": DataType.float64,
}
_TORCH_TYPES = {
    "torch.int8": DataType.int8, "torch.uint8": DataType.uint8, "torch.int32": DataType.int32,
    "torch.int64": DataType.int64, "torch.float16": DataType.float16,
    "torch.float32": DataType.float32, "torch.float64": DataType.float64,
    "torch.bfloat16": DataType.bfloat16,
    "torch.float8_e4m3fn": DataType.float8_e4m3, "torch.float8_e5m2": DataType.float8_e5m2,
}
_OPS = {"sum": ReduceOp.sum, "prod": ReduceOp.prod, "min": ReduceOp.min, "max": ReduceOp.max,
        "avg": ReduceOp.avg}


def _invalid(message):
    error = Error("INVALID_ARGUMENT: " + message)
    error.code = "INVALID_ARGUMENT"
    error.message = message
    return error


def _finished(request):
    """True once a (binding) request is done, failed or not."""
    try:
        return request.test()
    except Error:
        return True


def _is_torch_tensor(obj):
    torch = sys.modules.get("torch")  # never imported here: only tensors the caller made
    return torch is not None and isinstance(obj, torch.Tensor)  # Parameters too


def _memory(obj, writable):
    """(address, nbytes, DataType) of obj's own memory, never a copy."""
    if _is_torch_tensor(obj):
        if obj.device.type != "cpu":
            raise _invalid("a %s tensor: the Python bindings take CPU memory (GPU jobs use "
                           "NCCL with libnccl-net-tributary, docs/NCCL.md)" % obj.device.type)
        if not obj.is_contiguous():
            raise _invalid("a non-contiguous tensor (call .contiguous() on a copy you keep)")
        dtype = _TORCH_TYPES.get(str(obj.dtype))
        if dtype is None:
            raise _invalid("tensor type %s has no Tributary type" % obj.dtype)
        # The storage too: a tensor given other memory (set_, resize_, .data =)
        # while an operation runs must not free the memory the library uses.
        storage = obj.untyped_storage() if hasattr(obj, "untyped_storage") else obj.storage()
        return obj.data_ptr(), obj.numel() * obj.element_size(), dtype, storage
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is a dependency of the package
        raise _invalid("NumPy is needed for buffer-protocol objects")
    array = numpy.asarray(obj)  # no copy for arrays and buffers
    if array is not obj and array.base is None:
        # A list, tuple or scalar: asarray made a new array, which would be
        # freed on return while the library reads and writes its memory.
        raise _invalid("a %s is not memory of its own: pass a NumPy array, a CPU tensor or a "
                       "buffer-protocol object" % type(obj).__name__)
    if not array.flags.c_contiguous:
        raise _invalid("a non-contiguous array (numpy.ascontiguousarray makes a copy)")
    if writable and not array.flags.writeable:
        raise _invalid("a read-only buffer cannot receive a result")
    dtype = _NUMPY_TYPES.get(array.dtype.name)
    if dtype is None:
        raise _invalid("array type %s has no Tributary type" % array.dtype.name)
    if not array.dtype.isnative:
        raise _invalid("array of non-native byte order (%s): array.astype(array.dtype."
                       "newbyteorder('=')) makes a copy" % array.dtype.str)
    # The array holds obj's buffer export: while it lives, a bytearray cannot
    # be resized nor an mmap closed (BufferError) under a running operation.
    return array.ctypes.data, array.nbytes, dtype, array


def _ended(communicator, ended, key, ref):
    """A weakly held object ended: its registration ends with its last holder,
    at once where the lock is free, else at the next registration."""
    ended.append((key, ref))
    comm = communicator()
    if comm is not None and comm._lock.acquire(blocking=False):
        try:
            comm._settle()
        finally:
            comm._lock.release()


def _owner(obj):
    """The object that owns the memory a view of it (a NumPy view, a tensor
    view) shows: it lives at least as long as any view."""
    if _is_torch_tensor(obj):
        while getattr(obj, "_base", None) is not None:
            obj = obj._base
        return obj
    numpy = sys.modules.get("numpy")
    while numpy is not None and isinstance(getattr(obj, "base", None), numpy.ndarray):
        obj = obj.base
    return obj


def _address(obj):
    """Where an object's memory is now: a tensor's moves with set_ or resize_,
    a bytearray's when resized, an array's with resize()."""
    if _is_torch_tensor(obj):
        return obj.data_ptr()
    import numpy
    return numpy.asarray(obj).ctypes.data


class Request:
    """An asynchronous operation; keeps its buffers alive until it is done."""

    def __init__(self, request, keep, orphans):
        self._request = request
        self._keep = keep  # the objects, their arrays or storages
        self._orphans = orphans  # the communicator's: where a dropped one's buffers wait

    def __del__(self):
        # Dropped before wait() or test() saw it done: its buffers stay alive
        # with the communicator until it is (the library still uses them).
        # list.append is atomic: no lock needed from any thread.
        if getattr(self, "_keep", None) is not None:
            self._orphans.append((self._request, self._keep))

    def wait(self, timeout_s=None):
        """Blocks until done (GIL released); raises tributary.Error on failure or timeout."""
        try:
            self._request.wait(timeout_s)
        finally:
            if _finished(self._request):  # failed too: the buffers are the caller's again
                self._keep = None

    def test(self):
        """True once done; raises tributary.Error if it failed."""
        try:
            done = self._request.test()
        except Error:
            self._keep = None
            raise
        if done:
            self._keep = None
        return done


class Communicator:
    """One rank of a job at an aggregator (tributary::Communicator).

    Keywords: job_id, job_key, rank, world_size (default: CommConfig.from_environment(),
    i.e. TRIBUTARY_JOB_ID, TRIBUTARY_JOB_KEY and the launcher's rank and size), and any
    Options field (aggregator="host:port", transport, payload_bytes, window, lanes,
    op_timeout_ms, connect_timeout_ms, node_level, ...) over the TRIBUTARY_* environment.
    Creating it is collective with the node level on (every rank must create one).
    """

    def __init__(self, job_id=None, job_key=None, rank=None, world_size=None, **options):
        if None in (job_id, job_key, rank, world_size):
            config = CommConfig.from_environment()
        else:
            config = CommConfig()
            config.options = Options.from_environment()
        for name, value in (("job_id", job_id), ("job_key", job_key), ("rank", rank),
                            ("world_size", world_size)):
            if value is not None:
                setattr(config, name, value)
        opts = config.options
        for name, value in options.items():
            if not hasattr(opts, name):
                raise _invalid("unknown option %r" % name)
            setattr(opts, name, value)
        opts.validate()
        config.options = opts
        self._comm = _tributary.Communicator.create(config)
        # (address, nbytes) -> (Buffer, holders): the objects whose memory it
        # is, each (itself, kept alive, or a weak reference; the address of
        # its memory then). A registration whose holders all ended, or moved
        # to other memory (a tensor's set_, a bytearray resized), is released:
        # its memory may be freed and reused.
        self._registered = {}
        # The registrations, from any thread. Not re-entrant: a holder's end
        # (a weak-reference callback, at any allocation) settles at once only
        # where no thread, this one included, is inside a locked section.
        self._lock = threading.Lock()
        self._ended = []  # (key, weak reference) of holders that ended: settled under the lock
        self._unreleased = []  # Buffers whose release found them in use: tried again
        self._orphans = []  # (request, buffers) of Requests dropped before they were done
        self._reproducible = None  # a ReproducibleAllReducer, grown on demand

    def __del__(self):
        # Without close(): the C++ communicator (and its operations) must end
        # before the objects whose memory they use are released.
        if getattr(self, "_comm", None) is None:
            return
        try:
            # Not forever: a thread stopped at interpreter exit inside a call
            # that holds the lock would never let go of it.
            if self._lock.acquire(timeout=5):
                try:
                    self._close_locked()
                finally:
                    self._lock.release()
            else:
                self._comm.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    # -- memory ---------------------------------------------------------------
    def register(self, obj):
        """Registers obj's memory (kept alive until deregister or close); idempotent."""
        address, nbytes, _, _ = _memory(obj, writable=False)
        return self._register(address, nbytes, obj, keep=True)

    def _register(self, address, nbytes, obj, keep=False):
        with self._lock:
            return self._register_locked(address, nbytes, obj, keep)

    def _register_locked(self, address, nbytes, obj, keep=False):
        # Callers that submit an operation hold the lock until it is
        # submitted: another thread's registration cannot release this one
        # in between (its operation would fail NOT_FOUND).
        self._settle()
        # A registration that holds the whole range serves it (a view of a
        # registered array included) while one of its holders still has that
        # memory.
        for key, (buffer, holders) in list(self._registered.items()):
            if key[0] <= address and address + nbytes <= key[0] + key[1]:
                if not self._current(holders):
                    self._release(key)
                    continue
                self._hold(key, holders, obj, keep)
                return buffer
        # Registrations that overlap the range without holding it (the same
        # array grown in place, a view across two, a window sliding over an
        # array): those no operation uses go; one in use stays beside the new.
        for (other, size), (buffer, _) in list(self._registered.items()):
            if other < address + nbytes and address < other + size:
                try:
                    self._comm.deregister(buffer)
                except Error as e:
                    if getattr(e, "code", None) != "FAILED_PRECONDITION":
                        raise
                    continue
                self._registered.pop((other, size), None)
        buffer = self._comm.register_memory(address, nbytes)
        holders = []
        self._registered[(address, nbytes)] = (buffer, holders)
        self._hold((address, nbytes), holders, obj, keep)
        return buffer

    def _settle(self):
        """Under the lock: ends the registrations whose last holder ended, tries
        again the releases that found their buffer in use, and lets go of the
        buffers of dropped Requests that are done."""
        while self._ended:
            key, ref = self._ended.pop()
            entry = self._registered.get(key)
            # By identity: `in` and remove() compare with ==, elementwise on arrays.
            at = next((i for i, h in enumerate(entry[1]) if h[0] is ref), None) if entry else None
            if at is not None:
                del entry[1][at]
                if not entry[1]:
                    self._release(key)
        for buffer in list(self._unreleased):
            try:
                self._comm.deregister(buffer)
                self._unreleased.remove(buffer)
            except Error:
                pass
        # pop() and extend() are atomic: an orphan appended meanwhile stays.
        pending = []
        while self._orphans:
            orphan = self._orphans.pop()
            if not _finished(orphan[0]):
                pending.append(orphan)
        self._orphans.extend(pending)

    @staticmethod
    def _current(holders):
        """Drops the holders that ended or whose memory moved (another address
        than when they were added); true if one is left."""
        def holds(holder):
            h, address = holder
            obj = h() if isinstance(h, weakref.ref) else h
            return obj is not None and _address(obj) == address
        holders[:] = [h for h in holders if holds(h)]
        return bool(holders)

    @staticmethod
    def _held(holders, obj):
        return any((h() if isinstance(h, weakref.ref) else h) is obj for h, _ in holders)

    def _hold(self, key, holders, obj, keep):
        """Adds obj to the holders of registration `key`: weakly, unless keep or
        it takes no weak reference."""
        if self._held(holders, obj):
            if keep and not any(h is obj for h, _ in holders):
                holders.append((obj, _address(obj)))  # register() after an operation's own
            return
        if not keep:
            owner = _owner(obj)  # a view made per call would end it with each call
            if self._held(holders, owner):
                return
            ended, this = self._ended, weakref.ref(self)  # not keeping the communicator
            try:
                ref = weakref.ref(owner, lambda r: _ended(this, ended, key, r))
                holders.append((ref, _address(owner)))
                return
            except TypeError:
                pass  # no weak reference (bytearray): kept until deregister or close
        holders.append((obj, _address(obj)))

    def _release(self, key):
        """Under the lock: ends registration `key`."""
        entry = self._registered.pop(key, None)
        if entry is None:
            return
        try:
            self._comm.deregister(entry[0])
        except Error:
            # In use (a Request dropped before it finished) or closed: tried
            # again at the next registration; close() ends it anyway.
            self._unreleased.append(entry[0])

    def deregister(self, obj):
        """Releases obj's registration (fails while an operation uses it)."""
        address, nbytes, _, _ = _memory(obj, writable=False)
        with self._lock:
            for key, (buffer, _) in list(self._registered.items()):
                if key == (address, nbytes) or (key[0] == address and key[1] >= nbytes):
                    self._comm.deregister(buffer)
                    self._registered.pop(key, None)

    # -- collectives ----------------------------------------------------------
    @staticmethod
    def _operands(send, recv, op, count):
        """The checked operands: (op, recv, send's and recv's memory, element type, count,
        what keeps send's and recv's memory)."""
        reduce_op = _OPS.get(op, op) if isinstance(op, str) else op
        if not isinstance(reduce_op, ReduceOp):
            raise _invalid("unknown operation %r (sum, prod, min, max, avg)" % (op,))
        if recv is None:
            recv = send
        s_addr, s_bytes, s_type, s_owner = _memory(send, writable=recv is send)
        r_addr, r_bytes, r_type, r_owner = _memory(recv, writable=True)
        if s_type != r_type:
            raise _invalid("send is %s and recv %s" % (s_type.name, r_type.name))
        size = dtype_size(s_type)
        if count is None:
            count = s_bytes // size
        if count * size > min(s_bytes, r_bytes):
            raise _invalid("%d elements do not fit in send (%d B) and recv (%d B)"
                           % (count, s_bytes, r_bytes))
        if s_addr != r_addr and s_addr < r_addr + r_bytes and r_addr < s_addr + s_bytes:
            raise _invalid("send and recv overlap without being the same buffer (in place: "
                           "pass one array, or recv=None)")
        return reduce_op, recv, (s_addr, s_bytes), (r_addr, r_bytes), s_type, count, \
            (s_owner, r_owner)

    def all_reduce(self, send, recv=None, op="sum", count=None):
        """All-reduces send into recv (recv None or send: in place); returns a Request.

        op: "sum", "prod", "min", "max" or "avg" (or a ReduceOp). count: elements
        (default: all of send). Both must have the same element type.
        """
        reduce_op, recv, (s_addr, s_bytes), (r_addr, r_bytes), dtype, count, owners = \
            self._operands(send, recv, op, count)
        with self._lock:  # registered and submitted before another thread may release
            self._register_locked(s_addr, s_bytes, send)
            if r_addr != s_addr:
                self._register_locked(r_addr, r_bytes, recv)
            request = self._comm.all_reduce(s_addr, r_addr, count, dtype, reduce_op)
        return Request(request, (send, recv, owners), self._orphans)

    def reproducible_all_reduce(self, send, recv=None, op="sum", count=None):
        """Blocking all-reduce whose float results are bitwise identical whatever the
        arrival order, losses and tree shape (float32/float64, "sum" or "avg";
        docs/TRAINING.md). Its staging grows to the largest size asked for."""
        reduce_op, recv, (s_addr, _), (r_addr, _), dtype, count, _ = \
            self._operands(send, recv, op, count)
        if self._reproducible is None or self._reproducible[1] < count:
            self._reproducible = None  # the old staging goes before the new is registered
            self._reproducible = (_tributary.ReproducibleAllReducer.create(self._comm, count),
                                  count)
        self._reproducible[0].all_reduce(s_addr, r_addr, count, dtype, reduce_op)

    # -- state ----------------------------------------------------------------
    @property
    def rank(self):
        return self._comm.rank

    @property
    def world_size(self):
        return self._comm.world_size

    @property
    def options(self):
        """The options in effect (transport chosen, payload and window resolved)."""
        return self._comm.options

    def stats(self):
        """Transport and recovery counters (tributary::CommStats) as a dict."""
        return self._comm.stats()

    def health(self):
        """Raises tributary.Error with what aborted the communicator, if anything did."""
        self._comm.health()

    def close(self):
        """Leaves the job; the registered objects are released."""
        with self._lock:
            self._close_locked()

    def _close_locked(self):
        self._reproducible = None
        self._comm.close()
        self._registered.clear()
        self._unreleased.clear()
        del self._ended[:]
        # Closing ended their operations, unless a call running in another
        # thread still holds the communicator: those stay until it is.
        self._settle()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
