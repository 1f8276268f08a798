"""A serving rank (1..N-1): runs rank 0's requests on its own devices through pyoffload's public API.

The server's pyoffload is an ordinary runtime of its own (every installed backend but this one;
``PYOFFLOAD_MPI_SERVE`` narrows the list, as ``PYOFFLOAD_PLUGINS`` does): it validates, pools
nothing (rank 0's caching allocator already does), runs constructors and destructors, and
orders work on real queues.  The main loop takes rank 0's requests in order; whatever must wait
for a device runs on that device's queue (copies, then host functions that talk to the peer), so
the loop itself only blocks for the requests rank 0 waits for anyway.

Threads: the main loop; one watcher per queue, which waits for the queue's recorded events in
order and tells rank 0; a heartbeat.  Replies to rank 0 go out under one lock, so that a
``data`` header and its bytes stay together.

What keeps a copy fast is that, in the common case, it never leaves the main loop:

* the loop spins (yielding the core) for a while after each request before it naps, so the
  next request of a busy application is taken within microseconds (:class:`.comm.Backoff`);
  not while a queue of the rank runs work: its worker and watcher threads need the GIL and the
  cores, so the loop then tests a few dozen times and sleeps;
* a copy into or out of host memory (or a device's memory its backend calls host-addressable:
  PoCL's CPU devices) with an idle queue moves the bytes in the loop, straight from or into the
  memory; on rank 0's machine by one cross-memory read or write of the other
  rank's memory (:mod:`.cma`), which that rank takes no part in;
* an event recorded on a queue that has had no work since its last event was reported is
  reported at once by the loop, not by the watcher (a hand-off between two threads costs a
  wake-up and a GIL switch);
* the side of a copy between two servers that does not own the queue posts its sends or
  receives at once and the loop completes them between requests (no thread per copy).
* while the loop waits for the bytes of a copy it carries out, it takes the next request off the
  wire (one at most, :meth:`Server._read_ahead`): the synchronisation that follows a synchronous
  copy is answered the moment the bytes have moved.
"""

from __future__ import annotations

import ctypes
import os
import socket
import sys
import threading
import time
from queue import SimpleQueue
from typing import Any

import numpy as np

from pyoffload import OffloadError, settings

from . import cma
from .comm import (
    FINE_SLACK_NS,
    IDLE_CEILING,
    IDLE_SPIN,
    NAP,
    SERVE_VARIABLE,
    SPIN,
    Backoff,
    beat_interval,
    cuda_aware,
    device_in_place,
    timeout,
    timer_slack,
    wait,
    wait_all,
    wait_raw,
)
from .protocol import CHUNK, TAG_REPLY, TAG_REQUEST, ErrorRecord, chunks, error_record, picklable


class ServedQueue:
    """A queue of this rank and its watcher thread."""

    def __init__(self, server: Server, qid: int, queue: Any, profiling: bool) -> None:
        self.server, self.qid, self.queue, self.profiling = server, qid, queue, profiling
        self.error: ErrorRecord | None = None
        self.pending: SimpleQueue[tuple[int, Any, bool] | None] = SimpleQueue()
        # Events given to the watcher and events it has reported (each counter has one writer);
        # ``touched``: work was enqueued on the queue since the last event given to the watcher.
        self.recorded = 0
        self.reported = 0
        self.touched = False
        self.watcher = threading.Thread(target=self._watch, name=f"pyoffload-mpi-queue-{qid}", daemon=True)
        self.watcher.start()

    def fail(self, exc: BaseException) -> None:
        """Work on this queue failed outside an event: rank 0 reports it from later events."""
        record = error_record(exc, self.server.rank)
        if self.error is None:
            self.error = record
        self.server.reply(("qerror", self.qid, record))

    def _watch(self) -> None:
        while (item := self.pending.get()) is not None:
            eid, event, kept = item
            failure: ErrorRecord | None = None
            try:
                event.wait()
            except BaseException as exc:
                failure = error_record(exc, self.server.rank)
            self.server.reply(("event", eid, failure, kept))
            self.reported += 1

    def idle(self) -> bool:
        """Whether the queue has nothing in flight, as its backend says.  Not ``Queue.query``:
        that moves the runtime's record of the queue past finished work, failed work included,
        and a later wait would then no longer raise the failure."""
        queue = self.queue
        try:
            return bool(queue.disp.queue_query_impl(queue.dh, queue.handle))
        except Exception:  # a failure of its work: the next event reports it
            return False

    def settled(self) -> bool:
        """Whether an event recorded now could only complete at once and without a failure: no
        work since the last event given to the watcher, which has reported it (with the failure
        of the work before it, if any)."""
        return not self.touched and self.reported == self.recorded

    def close(self) -> None:
        self.pending.put(None)
        self.watcher.join()


class Server:
    """The request loop of one serving rank."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.rank: int = comm.Get_rank()
        self.limit = timeout()
        self._reply_lock = threading.Lock()
        self._running = True
        # Sides of copies between two servers in progress (main loop only): see _side.
        self._sides: list[_Side] = []
        self._sides_tested = 0.0  # when a pass last tested every side
        self.answered_at_once = 0  # events the main loop reported itself (rpc_stats)
        # The next request, read while a copy was in flight (_read_ahead); handled before any other.
        self._next: tuple[Any, ...] | None = None
        self.read_ahead = 0  # requests read that way (rpc_stats)
        self.requests = 0  # requests handled (rpc_stats)
        self.moved_in_place = 0  # copies whose bytes this loop moved straight into or out of the memory (rpc_stats)
        # Cross-memory copies (cma.py): the probe other ranks read, and the pid of each rank whose
        # memory this one can read and write (rank 0 introduces them: rpc_peers).
        self._probe = cma.Probe()
        self.peers: dict[int, int] = {}
        self.initialised = False  # pyoffload started here (by rank 0's hello)
        # The staging buffer of copies this loop makes at once (_staged_now), made on first use:
        # one allocation for all of them, so that a small copy pays no allocation and a large
        # one no page faults of fresh memory (main loop only; each such copy is done with it
        # before the loop takes the next request).
        self._scratch: np.ndarray | None = None
        self._scratch_at = 0
        self._reset()

    def _reset(self) -> None:
        self.devices: list[Any] = []
        self.contexts: dict[int, Any] = {}
        self.queues: dict[int, ServedQueue] = {}
        self.events: dict[int, Any] = {}
        self.programs: dict[int, Any] = {}
        self.kernels: dict[int, Any] = {}
        self.allocations: dict[int, Any] = {}
        self.images: dict[bytes, bytes] = {}
        # What _in_place found at an address: the memory up to the end of its allocation, or
        # None (not host memory).  Emptied whenever memory may go away (free, unload, teardown).
        self._views: dict[int, memoryview | None] = {}

    # -- talking to rank 0 ---------------------------------------------------------------------

    def reply(self, message: tuple[Any, ...]) -> None:
        with self._reply_lock:
            wait(self.comm.isend(message, 0, TAG_REPLY))

    def _heartbeat(self) -> None:
        interval = beat_interval(self.limit)
        while self._running:
            time.sleep(interval)
            if self._running:
                self.reply(("beat",))

    def serve(self) -> None:
        """Answer rank 0 until it says ``exit``."""
        threading.Thread(target=self._heartbeat, name="pyoffload-mpi-heartbeat", daemon=True).start()
        timer_slack(FINE_SLACK_NS)  # this loop naps (comm.py)
        backoff = Backoff(ceiling=IDLE_CEILING, spin=IDLE_SPIN)
        improbe = self.comm.improbe
        busy_turns = 0
        while self._running:
            request = self._next
            if request is not None:
                self._next = None
            else:
                message = improbe(0, TAG_REQUEST)
                request = None if message is None else message.recv()
            if request is not None:
                self._handle(request)
                backoff.reset()
                busy_turns = 0
            elif self._sides and self._progress_sides():
                backoff.reset()
            else:
                if self._queues_busy():
                    # This rank's own threads run work (a queue's worker, its watcher): test a
                    # few dozen times without giving the core away, then sleep growing steps,
                    # never napping: waking often would fight them for the GIL at every turn.
                    busy_turns += 1
                    if busy_turns > BUSY_TURNS:
                        time.sleep(min(BUSY_CEILING, 2e-5 * (busy_turns - BUSY_TURNS)))
                    continue
                if self._sides:  # bytes of a copy with another server are on their way
                    backoff.spin, backoff.nap, backoff.ceiling = SPIN, 0.0, 1e-4
                else:
                    backoff.spin, backoff.nap, backoff.ceiling = IDLE_SPIN, NAP, IDLE_CEILING
                backoff.pause()

    def _read_ahead(self) -> None:
        """Take the next request off the wire while a copy is in flight, so that the one that
        follows a copy (the synchronisation of a synchronous copy, the next copy of a queue) is
        handled the moment the bytes have moved, not an improbe and an unpickling later.  One at
        most, and called only from waits whose receives are all posted: the bytes of a ``submit``
        follow its request on the same tag, and must not be taken for a request."""
        if self._next is None:
            message = self.comm.improbe(0, TAG_REQUEST)
            if message is not None:
                self._next = message.recv()
                self.read_ahead += 1

    def _queues_busy(self) -> bool:
        """Whether work of a queue of this rank may still be running (or its event reported)."""
        for served in self.queues.values():
            if served.recorded != served.reported:
                return True
            if served.touched and not served.idle():
                return True
        return False

    def _handle(self, request: tuple[Any, ...]) -> None:
        self.requests += 1
        self._carry_out(request)

    def _carry_out(self, request: tuple[Any, ...]) -> None:
        op = request[0]
        if op in _RPC:
            rid = request[1]
            try:
                value = getattr(self, "rpc_" + op)(*request[2:])
            except BaseException as exc:
                self.reply(("reply", rid, False, error_record(exc, self.rank)))
            else:
                self.reply(("reply", rid, True, value))
            return
        qid = request[1]
        served = self.queues.get(qid)
        try:
            getattr(self, "do_" + op)(served, *request[2:])
        except BaseException as exc:
            if served is not None:
                served.fail(exc)

    # -- runtime, contexts, memory -----------------------------------------------------------

    def rpc_hello(self) -> list[dict[str, Any]]:
        import pyoffload

        serve = settings.text(SERVE_VARIABLE)
        if serve is not None:
            os.environ["PYOFFLOAD_PLUGINS"] = serve
        os.environ["PYOFFLOAD_POOL_THRESHOLD"] = "0"  # rank 0's allocator pools already
        self.devices = [d for d in pyoffload.devices() if d.backend != "mpi"]
        self.initialised = True
        described = []
        aware = cuda_aware()
        for index, device in enumerate(self.devices):
            info = {k: v for k, v in device.info.items() if picklable(v)}
            described.append(
                {
                    "index": index,
                    "id": device.id,
                    "name": device.name,
                    "vendor": device.vendor,
                    "host_memory": _in_place_memory(device),
                    "type": device.type.value,
                    "backend": device.backend,
                    "platform": device.platform.name,
                    "platform_short": device.platform.short_name,
                    "platform_version": device.platform.version,
                    "info": info,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "compiler_id": self._compiler_id(device),
                    "target": self._target(device),
                    "cuda_aware": aware,
                }
            )
        return described

    @staticmethod
    def _compiler_id(device: Any) -> str | None:
        try:
            return device.disp.compiler_id_impl(device.handle)  # type: ignore[no-any-return]
        except Exception:
            return None

    @staticmethod
    def _target(device: Any) -> str | None:
        try:
            return device.target  # type: ignore[no-any-return]
        except Exception:
            return None  # builds for it then go through the rank's compile_impl

    def rpc_deinit(self) -> None:
        import pyoffload

        for served in self.queues.values():
            served.close()
        self._reset()
        if self.initialised:
            self.initialised = False
            pyoffload.shutdown()

    def rpc_exit(self) -> None:
        self.rpc_deinit()
        self._running = False

    def rpc_context(self, cid: int, indices: list[int]) -> None:
        import pyoffload

        self.contexts[cid] = pyoffload.Context([self.devices[i] for i in indices])

    def rpc_context_destroy(self, cid: int) -> None:
        self._views.clear()
        self.contexts.pop(cid).close()

    def rpc_alloc(self, cid: int, index: int, size: int) -> int:
        alloc = self.contexts[cid].alloc(size, device=self.devices[index])
        self.allocations[alloc.ptr] = alloc
        return alloc.ptr  # type: ignore[no-any-return]

    def rpc_free(self, ptr: int) -> None:
        self._views.clear()
        self.allocations.pop(ptr).free()

    def rpc_images(self, index: int) -> dict[str, bytes] | None:
        device = self.devices[index]
        return device.disp.conformance_images_impl(device.handle)  # type: ignore[no-any-return]

    def rpc_known_failures(self, index: int) -> dict[str, str]:
        device = self.devices[index]
        return dict(device.disp.known_failures_impl(device.handle) or {})

    def rpc_compile(self, index: int, source: str, options: tuple[str, ...]) -> bytes:
        device = self.devices[index]
        return device.disp.compile_impl(device.handle, source, options)  # type: ignore[no-any-return]

    def rpc_stats(self) -> dict[str, Any]:
        """What tests check of how requests were carried out: threads alive, events kept, events
        the main loop reported at once and events a queue's watcher reported, sides of copies
        between servers in progress."""
        return {
            "threads": threading.active_count(),
            "events": len(self.events),
            "answered_at_once": self.answered_at_once,
            "watched": sum(served.reported for served in self.queues.values()),
            "sides": len(self._sides),
            "read_ahead": self.read_ahead,
            "requests": self.requests,
            "in_place": self.moved_in_place,
            "peers": sorted(self.peers),
        }

    def rpc_whoami(self) -> tuple[str, int, int, bytes]:
        """Where this process is and a probe of its memory (:class:`.cma.Probe`)."""
        return self._probe.describe()

    def rpc_peers(self, described: dict[int, tuple[str, int, int, bytes]]) -> list[int]:
        """The ranks (rank 0 included) whose memory this process can read and write, of those
        ``described`` (each rank's :meth:`rpc_whoami`): tried on each one's probe."""
        self.peers = {rank: d[1] for rank, d in described.items() if rank != self.rank and cma.reachable(d)}
        return sorted(self.peers)

    def rpc_raw(self, role: str, peer: int, mpi_tag: int, size: int, count: int) -> None:
        """``count`` plain mpi4py ``Send`` (``role`` "send") or ``Recv`` of ``size`` bytes with
        ``peer``, the same buffer each time: the baseline the benchmarks compare copies with."""
        buffer = bytearray(size)
        byte = _byte()
        if role == "send":
            for _ in range(count):
                self.comm.Send([buffer, byte], peer, mpi_tag)
        elif role == "recv":
            for _ in range(count):
                self.comm.Recv([buffer, byte], peer, mpi_tag)
        else:  # a round trip: "echo" receives ``size`` bytes and answers 1, "serve" the reverse
            one = bytearray(1)
            first, then = ([buffer, byte], [one, byte]) if role == "echo" else ([one, byte], [buffer, byte])
            for _ in range(count):
                self.comm.Recv(first, peer, mpi_tag)
                self.comm.Send(then, peer, mpi_tag)

    def rpc_local_copy(self, ptr: int, size: int, count: int, to_device: bool) -> float:
        """Seconds per blocking ``pyoffload.memcpy`` of ``size`` bytes between a host buffer and
        the memory at ``ptr`` of this rank, made here ``count`` times: the device's own local copy,
        which the benchmarks add to a raw round trip to tell what a remote copy costs over both."""
        import pyoffload

        host = np.zeros(size, np.uint8)
        memcpy = pyoffload.memcpy
        pair = (ptr, host) if to_device else (host, ptr)
        memcpy(*pair, size)
        start = time.perf_counter()
        for _ in range(count):
            memcpy(*pair, size)
        return (time.perf_counter() - start) / count

    # -- programs ---------------------------------------------------------------------------

    def rpc_load(
        self, pid: int, cid: int, index: int, digest: bytes, image: bytes | None
    ) -> list[tuple[str, str, int]]:
        if image is not None:
            self.images[digest] = image
        program = self.contexts[cid].load_program(self.devices[index], self.images[digest])
        self.programs[pid] = program
        return [(s.name, s.kind.name, s.size) for s in program.symbols()]

    def rpc_unload(self, pid: int) -> None:
        self._views.clear()
        program = self.programs.pop(pid)
        for kid in [k for k, kernel in self.kernels.items() if kernel.program is program]:
            del self.kernels[kid]
        program.unload()

    def rpc_kernel(self, pid: int, name: str, kid: int) -> tuple[tuple[str, ...] | None, dict[str, Any]]:
        kernel = self.programs[pid].kernel(name)
        self.kernels[kid] = kernel
        attributes = {k: v for k, v in kernel.attributes.items() if picklable(v)}
        return kernel.signature, attributes

    def rpc_global(self, pid: int, name: str) -> tuple[int, int]:
        var = self.programs[pid].global_variable(name)
        return var.address, var.size

    # -- queues and events ------------------------------------------------------------------

    def rpc_queue(self, qid: int, cid: int, index: int, profiling: bool) -> None:
        queue = self.contexts[cid].create_queue(self.devices[index], profiling=profiling)
        self.queues[qid] = ServedQueue(self, qid, queue, profiling)

    def rpc_queue_destroy(self, qid: int) -> None:
        served = self.queues.pop(qid)
        try:
            served.queue.wait()
        except OffloadError:
            pass  # rank 0 reported it through the queue's events already
        served.queue.destroy()
        served.close()

    def rpc_elapsed(self, start: int, end: int) -> float:
        return self.events[end].elapsed_ms(self.events[start])  # type: ignore[no-any-return]

    def do_record(self, served: ServedQueue, eid: int, keep: bool) -> None:
        if served.settled():
            # Complete already: say so now (rank 0 adds the queue's failure no wait raised yet).
            # A wait for it is then no wait at all: only a profiling queue keeps an event (to time).
            kept = keep and served.profiling
            if kept:
                self.events[eid] = served.queue.record()
            self.answered_at_once += 1
            self.reply(("event", eid, None, kept))
            return
        event = served.queue.record()
        if keep:
            self.events[eid] = event
        served.touched = False
        served.recorded += 1
        served.pending.put((eid, event, keep))

    def do_then_record(self, served: ServedQueue, eid: int, request: tuple[Any, ...]) -> None:
        """``request``, then an event recorded behind it (not kept): the two requests a
        synchronous copy would have sent, in one message (one request, in ``rpc_stats``).  A
        failure of the request is the queue's, reported (``_carry_out``) before the event is."""
        self._carry_out(request)
        self.do_record(served, eid, False)

    def do_put(self, served: ServedQueue, dst: int, data: bytes) -> None:
        """A small copy whose bytes came inside the request."""
        size = len(data)
        direct = self._in_place(dst, size, served)
        if direct is not None:
            direct[:] = data
            return
        source = np.frombuffer(data, np.uint8)
        if self._staged_now(served, size):
            self._copy_now(served, dst, source, size)
            return
        served.touched = True
        served.queue.memcpy(dst, source, size)

    def do_event_release(self, served: None, eid: int) -> None:
        self.events.pop(eid, None)

    def do_wait_events(self, served: ServedQueue, eids: list[int]) -> None:
        events = [self.events[e] for e in eids if e in self.events]  # the others were complete when recorded
        if events:
            served.touched = True
            served.queue.wait_events(*events)

    def do_launch(
        self,
        served: ServedQueue,
        kid: int,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
    ) -> None:
        served.touched = True
        served.queue.launch(self.kernels[kid], grid, block, args)

    def do_fill(self, served: ServedQueue, ptr: int, pattern: bytes, size: int) -> None:
        served.touched = True
        served.queue.memfill(ptr, pattern, size)

    def do_copy(self, served: ServedQueue, dst: int, src: int, size: int) -> None:
        served.touched = True
        served.queue.memcpy(dst, src, size)

    def do_submit(self, served: ServedQueue, dst: int, size: int) -> None:
        # The bytes follow on the request channel: take them all (rank 0 sent them already).
        direct = self._in_place(dst, size, served)
        if direct is not None:  # straight into the device's memory: no staging, no second copy
            # Every chunk's receive is posted before the first read ahead; the bytes mostly move
            # within the first MPI call (the receiver copies them), so that one reads ahead too.
            requests = _post(self.comm.Irecv, direct, 0, TAG_REQUEST)
            self._read_ahead()
            wait_all(requests, self._read_ahead)
            return
        # One message (a chunk at most), and nothing before it on the queue: here, blocking.
        if self._staged_now(served, size, CHUNK):
            buffer, _ = self._staging_now()
            wait_raw(self.comm.Irecv([buffer[:size], _byte()], 0, TAG_REQUEST))
            self._read_ahead()  # (the synchronisation of a synchronous copy is on its way)
            self._copy_now(served, dst, buffer, size)
            return
        # Else the device copies each chunk while the next ones arrive: every receive is posted
        # at once (the transport never waits for this loop), each chunk goes to the device as
        # soon as it is here.
        served.touched = True
        staging = np.empty(size, np.uint8).data
        requests = _post(self.comm.Irecv, staging, 0, TAG_REQUEST)
        failure: BaseException | None = None
        for request, (offset, length) in zip(requests, chunks(size), strict=True):
            wait_raw(request)
            if failure is None:
                try:
                    served.queue.memcpy(dst + offset, staging[offset : offset + length], length)
                except BaseException as exc:
                    failure = exc
        if failure is not None:
            raise failure

    # Copies by cross-memory reads and writes (cma.py): the rank that carries out the copy moves
    # the bytes alone, from or into the other rank's memory, which that rank keeps until the
    # copy's event completes (rank 0: the generic layer holds the host buffer; another server:
    # its memory is rank 0's allocation, freed only after the work that uses it).

    def do_submit_from(self, served: ServedQueue, dst: int, size: int, src: int) -> None:
        """A copy from rank 0's memory at ``src``: read into the memory itself when it is in
        place, else into a staging buffer the queue copies to the device."""
        pid = self.peers[0]
        direct = self._in_place(dst, size, served)
        if direct is not None:
            self._read_ahead()  # (the synchronisation of a synchronous copy is on its way)
            cma.read(pid, src, cma.address(direct), size)
            return
        if self._staged_now(served, size):
            staging, at = self._staging_now()
            cma.read(pid, src, at, size)
            self._read_ahead()
            self._copy_now(served, dst, staging, size)
            return
        # In pieces: the device copies each piece while this loop reads the next.
        staging = np.empty(size, np.uint8)
        served.touched = True
        base = staging.ctypes.data
        for offset, length in chunks(size, _piece(size)):
            cma.read(pid, src + offset, base + offset, length)
            served.queue.memcpy(dst + offset, staging[offset : offset + length], length)

    def do_retrieve_to(self, served: ServedQueue, src: int, size: int, dst: int) -> None:
        """A copy into rank 0's memory at ``dst``: written from the memory itself when it is in
        place, else from a staging buffer once the queue gets there."""
        pid = self.peers[0]
        direct = self._in_place(src, size, served)
        if direct is not None:
            self._read_ahead()
            cma.write(pid, dst, cma.address(direct), size)
            return
        if self._staged_now(served, size):
            scratch, at = self._staging_now()
            self._copy_now(served, scratch, src, size)
            self._read_ahead()
            cma.write(pid, dst, at, size)
            return
        staging = np.empty(size, np.uint8)
        if served.settled() or served.idle():  # in order already: in pieces, here
            base = staging.ctypes.data

            def write(offset: int, length: int) -> None:
                cma.write(pid, dst + offset, base + offset, length)

            self._from_device(served, staging, src, _piece(size), write)
            return
        served.touched = True
        served.queue.memcpy(staging.data, src, size)
        served.queue.launch_host_function(self._guarded(served, lambda: cma.write(pid, dst, staging.ctypes.data, size)))

    def do_xfer_cma(self, served: ServedQueue, role: str, peer: int, there: int, ptr: int, size: int) -> None:
        """A copy between this rank and ``peer`` ordered on this rank's queue: ``role`` "read"
        (this rank receives: from ``there`` in the peer's host memory into ``ptr``) or "write"
        (this rank sends: from ``ptr`` to ``there``).  The peer takes no part."""
        pid = self.peers[peer]
        move = cma.read if role == "read" else cma.write
        direct = self._in_place(ptr, size, served)
        if direct is not None:
            self._read_ahead()
            move(pid, there, cma.address(direct), size)
            return
        served.touched = True
        staging = np.empty(size, np.uint8)
        moved = self._guarded(served, lambda: move(pid, there, staging.ctypes.data, size))
        if role == "write":
            served.queue.memcpy(staging.data, ptr, size)
            served.queue.launch_host_function(moved)
        else:
            served.queue.launch_host_function(moved)
            served.queue.memcpy(ptr, staging.data, size)

    def do_retrieve(self, served: ServedQueue, src: int, size: int, mpi_tag: int) -> None:
        """Send ``size`` bytes from ``src`` to rank 0, whose receives are posted already (one per
        chunk, on ``mpi_tag``): from the memory itself when it is in place, else from a staging
        buffer once the queue gets there.  Its sends complete before any later event is reported:
        in this loop, or in the queue's order.  If nothing can be sent, empty messages complete
        rank 0's receives."""
        try:
            direct = self._in_place(src, size, served)
            if direct is not None:
                requests = _post(self.comm.Isend, direct, 0, mpi_tag)
                self._read_ahead()
                wait_all(requests, self._read_ahead)
                return
            if self._staged_now(served, size, CHUNK):  # one message: copied, then sent
                scratch = self._staging_now()[0]
                self._copy_now(served, scratch, src, size)
                requests = _post(self.comm.Isend, scratch.data[:size], 0, mpi_tag)
                self._read_ahead()
                wait_all(requests, self._read_ahead)
                return
            staging = np.empty(size, np.uint8).data
            pieces = size > CHUNK and (served.settled() or served.idle())
            if not pieces:
                served.touched = True
                served.queue.memcpy(staging, src, size)
        except BaseException:
            wait_all([self.comm.Isend([b"", _byte()], 0, mpi_tag) for _ in chunks(size)])
            raise
        if pieces:
            # In order already: each chunk is sent as soon as the device has copied it, while the
            # device copies the next.
            sends: list[Any] = []

            def send(offset: int, length: int) -> None:
                sends.append(self.comm.Isend([staging[offset : offset + length], _byte()], 0, mpi_tag))

            try:
                self._from_device(served, np.frombuffer(staging, np.uint8), src, CHUNK, send)
            finally:
                wait_all(sends, self._read_ahead)
                # the receives of the chunks not sent are completed empty (rank 0 sets them aside)
                unsent = len(list(chunks(size))) - len(sends)
                wait_all([self.comm.Isend([b"", _byte()], 0, mpi_tag) for _ in range(unsent)])
            return
        served.queue.launch_host_function(
            self._guarded(served, lambda: wait_all(_post(self.comm.Isend, staging, 0, mpi_tag)))
        )

    def do_xfer(self, served: ServedQueue | None, role: str, peer: int, mpi_tag: int, ptr: int, size: int) -> None:
        """One side of a copy between two servers: ``role`` is ``send`` (this rank holds the
        source) or ``recv``; with a queue, this side orders the copy on it, else it runs now."""
        if served is None:
            self._side(role, peer, mpi_tag, ptr, size)
            return
        direct = self._in_place(ptr, size, served)
        if direct is not None:  # in order already: move the bytes now, from or into the memory itself
            check = self._deadline(self._while_moving)  # the loop's own sides keep moving meanwhile
            if role == "send":
                self._push(direct, peer, mpi_tag, ack=True, check=check)
            else:
                self._pull(direct, peer, mpi_tag, check=check)
            return
        if served.settled() or served.idle():  # in order already: pipelined, here
            if role == "send":
                self._send_from_device(served, ptr, size, peer, mpi_tag)
            else:
                self._receive_to_device(served, ptr, size, peer, mpi_tag)
            return
        served.touched = True
        view = np.empty(size, np.uint8).data
        if role == "send":
            served.queue.memcpy(view, ptr, size)
            served.queue.launch_host_function(self._guarded(served, lambda: self._push(view, peer, mpi_tag, ack=True)))
        else:
            served.queue.launch_host_function(self._guarded(served, lambda: self._pull(view, peer, mpi_tag)))
            served.queue.memcpy(ptr, view, size)

    def _send_from_device(self, served: ServedQueue, ptr: int, size: int, peer: int, mpi_tag: int) -> None:
        """The sending side of a copy between servers from a device's own memory, on a queue with
        nothing in flight: each chunk leaves the moment the device has copied it, while the device
        copies the next (the peer posted every chunk's receive at once); then the peer's
        acknowledgement that the bytes are where they go.  Chunks the device could not copy are
        sent empty, so that the peer's receives complete."""
        staging = np.empty(size, np.uint8)
        check = self._deadline(self._while_moving)
        sends: list[Any] = []
        testall = _requests().Testall

        def send(offset: int, length: int) -> None:
            sends.append(self.comm.Isend([staging[offset : offset + length], _byte()], peer, mpi_tag))
            testall(sends)  # (progress for the chunks before it, by messages)

        try:
            self._from_device(served, staging, ptr, CHUNK, send)
        finally:
            unsent = len(list(chunks(size))) - len(sends)
            sends += [self.comm.Isend([b"", _byte()], peer, mpi_tag) for _ in range(unsent)]
            wait_all(sends, check)
        wait_raw(self.comm.Irecv([bytearray(1), _byte()], peer, mpi_tag), check)

    def _receive_to_device(self, served: ServedQueue, ptr: int, size: int, peer: int, mpi_tag: int) -> None:
        """The receiving side of a copy between servers into a device's own memory, on a queue with
        nothing in flight: every chunk's receive is posted at once, and each chunk is handed to
        the device (enqueued) as it arrives, while the next ones arrive.  A failure of the device
        copy is raised once every chunk has arrived (the peer must not wait for nothing)."""
        served.touched = True
        staging = np.empty(size, np.uint8).data
        check = self._deadline(self._while_moving)
        failure: BaseException | None = None
        for request, (offset, length) in zip(_post(self.comm.Irecv, staging, peer, mpi_tag), chunks(size), strict=True):
            wait_raw(request, check)
            if failure is None:
                try:
                    served.queue.memcpy(ptr + offset, staging[offset : offset + length], length)
                except BaseException as exc:
                    failure = exc
        if failure is not None:
            raise failure

    def _side(self, role: str, peer: int, mpi_tag: int, ptr: int, size: int) -> None:
        """The side without a queue: its sends or receives are posted now and the main loop
        completes them between requests (the peer's side runs when its queue gets there)."""
        import pyoffload

        direct = self._in_place(ptr, size, None)
        if role == "send":
            if direct is not None:
                self._sides.append(_Side(_post(self.comm.Isend, direct, peer, mpi_tag), direct, self.limit))
                return
            # A device's own memory: each chunk is sent as soon as the device has copied it, and
            # moves (the peer receives it) while the device copies the next.
            view = np.empty(size, np.uint8).data
            byte = _byte()
            for offset, length in chunks(size):
                piece = view[offset : offset + length]
                pyoffload.memcpy(piece, ptr + offset, length)
                self._sides.append(_Side([self.comm.Isend([piece, byte], peer, mpi_tag)], piece, self.limit))
            return

        def acknowledge() -> None:
            ack = self.comm.Isend([bytearray(1), _byte()], peer, mpi_tag)  # tells the queue's side
            self._sides.append(_Side([ack], None, self.limit))

        if direct is not None:
            self._sides.append(_Side(_post(self.comm.Irecv, direct, peer, mpi_tag), direct, self.limit, acknowledge))
            return
        # A device's own memory: each chunk goes to the device as soon as it has arrived, while
        # the next ones arrive; the acknowledgement follows the last one.
        view = np.empty(size, np.uint8).data
        byte = _byte()
        left = [len(list(chunks(size)))]

        def landed(offset: int, length: int) -> Any:
            def then() -> None:
                left[0] -= 1
                try:
                    pyoffload.memcpy(ptr + offset, view[offset : offset + length], length)
                finally:
                    if not left[0]:
                        acknowledge()

            return then

        for offset, length in chunks(size):
            piece = view[offset : offset + length]
            request = self.comm.Irecv([piece, byte], peer, mpi_tag)
            self._sides.append(_Side([request], piece, self.limit, landed(offset, length)))

    def _progress_sides(self) -> bool:
        """Complete what can be completed of the sides in progress; ``True`` if any finished.
        Sides mostly complete in the order they were posted (a queue orders its copies), so
        a call tests the oldest few, and all of them every few milliseconds: a pass stays short
        however many copies rank 0 has queued, and none waits for long behind an older one."""
        sides = self._sides
        if not sides:
            return False
        from mpi4py import MPI

        now = time.monotonic()
        if len(sides) > _SIDES_AT_ONCE and now - self._sides_tested < _ALL_SIDES_EVERY:
            sides, rest = sides[:_SIDES_AT_ONCE], sides[_SIDES_AT_ONCE:]
        else:
            self._sides_tested = now
            rest = []
        self._sides = []
        finished = False
        MPI.Request.Testsome([request for side in sides for request in side.requests])  # one call
        for side in sides:
            if not any(side.requests):  # each completed (a completed request is MPI_REQUEST_NULL)
                finished = True
                if side.then is not None:
                    try:
                        side.then()
                    except BaseException as exc:  # nobody waits for this side: say why it failed
                        print(
                            f"pyoffload_mpi: rank {self.rank}: a copy to another server failed: {exc!r}",
                            file=sys.stderr,
                        )
            elif now > side.deadline:
                for request in side.requests:
                    try:
                        request.Cancel()
                    except Exception:
                        pass
                print(
                    f"pyoffload_mpi: rank {self.rank}: a copy with another server gave up: the peer did "
                    f"nothing for {self.limit:g} s",
                    file=sys.stderr,
                )
            else:
                self._sides.append(side)
        self._sides[len(self._sides) :] = rest  # (then() may have appended an acknowledgement)
        return finished

    def _push(self, view: memoryview, peer: int, mpi_tag: int, ack: bool, check: Any = None) -> None:
        # Every chunk in flight at once: MPI moves the next while the peer takes the last.
        check = check or self._deadline()
        wait_all(_post(self.comm.Isend, view, peer, mpi_tag), check)
        if ack:
            wait_raw(self.comm.Irecv([bytearray(1), _byte()], peer, mpi_tag), check)

    def _pull(self, view: memoryview, peer: int, mpi_tag: int, check: Any = None) -> None:
        _receive_all(self.comm, view, peer, mpi_tag, check or self._deadline())

    def _while_moving(self) -> None:
        """What a copy this loop carries out does on each turn of its wait."""
        if self._sides:
            self._progress_sides()
        self._read_ahead()

    def _deadline(self, also: Any = None) -> Any:
        """A check for peer waits: give up after the timeout (a peer that stopped answering);
        ``also`` runs on each check."""
        end = time.monotonic() + self.limit

        def check() -> None:
            if also is not None:
                also()
            if time.monotonic() > end:
                from pyoffload.backend import BackendError

                raise BackendError(f"rank {self.rank}: a peer rank sent nothing for {self.limit:g} s")

        return check

    def _in_place(self, address: int, size: int, served: ServedQueue | None) -> memoryview | None:
        """The ``size`` bytes at ``address`` themselves, when MPI may read or write them now: the
        memory is memory this process may address (the host backend's device memory, or a
        device's own where its backend says so: ``_host_memory``) and the queue that orders the
        copy, if any, has nothing left in flight, so that moving the bytes at once keeps queue
        order.  ``None`` otherwise: the copy is then staged and ordered on the queue."""
        if served is not None and not (served.settled() or served.idle()):
            return None
        try:
            view = self._views[address]
        except KeyError:
            view = self._views[address] = _host_memory(address)
        if view is None or len(view) < size:
            return None  # (past the end: the staged copy reports the error)
        self.moved_in_place += 1
        return view[:size]

    def _staged_now(self, served: ServedQueue, size: int, limit: int = 0) -> bool:
        """Whether a staged copy (memory MPI cannot read or write itself: a device's own) is made
        here and now, blocking: it is small (the loop takes no request meanwhile: up to ``limit``
        bytes, by default ``STAGED_NOW_UP_TO``; by messages a whole chunk, which arrives or leaves
        in one message anyway) and nothing is in flight on its queue, so that making it at once
        keeps queue order.  A synchronous copy then
        costs its bytes' trip and the device's own copy: no enqueue, no event for the watcher
        thread to wait for and report, no host function (each a thread hand-off on this rank)."""
        return size <= (limit or STAGED_NOW_UP_TO) and (served.settled() or served.idle())

    def _staging_now(self) -> tuple[np.ndarray, int]:
        """The staging buffer of a copy made at once (``_staged_now``; ``CHUNK`` bytes, enough
        for any of them) and its address."""
        if self._scratch is None:
            self._scratch = np.empty(CHUNK, np.uint8)
            self._scratch_at = self._scratch.ctypes.data
        return self._scratch, self._scratch_at

    def _copy_now(self, served: ServedQueue, dst: Any, src: Any, size: int) -> None:
        """The copy, blocking (``pyoffload.memcpy`` without a queue: the backend's own blocking
        copy, cheaper here than an enqueue and a wait).  ``served`` has nothing in flight and no
        failure rank 0 has not been told of (``_staged_now``), so the copy is in its order.  The
        queue stays as settled as it was (an event recorded next completes at once) unless the
        copy fails: the failure is then the queue's (``_handle`` reports it) and later events go
        through the watcher."""
        touched, served.touched = served.touched, True
        _memcpy()(dst, src, size)
        served.touched = touched

    def _from_device(self, served: ServedQueue, staging: Any, src: int, piece: int, deliver: Any) -> None:
        """Copy the device memory at ``src`` into ``staging`` (a numpy array) in pieces on
        ``served``'s queue, which has nothing in flight, and call ``deliver(offset, length)`` for
        each piece as soon as the device has copied it, while the device copies the next ones.
        Blocking: the copy is in queue order when this returns.  A failure is the queue's."""
        queue = served.queue
        touched, served.touched = served.touched, True
        pending = []
        for offset, length in chunks(len(staging), piece):
            queue.memcpy(staging[offset : offset + length], src + offset, length)
            pending.append((offset, length, queue.record()))
        for offset, length, event in pending:
            event.wait()
            deliver(offset, length)
        served.touched = touched

    def _guarded(self, served: ServedQueue, fn: Any) -> Any:
        """A host function that reports its failure to rank 0 as the queue's (the server's own
        runtime would only raise it on a wait nobody makes here)."""

        def run() -> None:
            try:
                fn()
            except BaseException as exc:
                served.fail(exc)

        return run


def _memcpy() -> Any:
    """``pyoffload.memcpy`` (imported on first use: the server's pyoffload starts only with
    rank 0's hello, after the settings it needs are made)."""
    global _MEMCPY
    if _MEMCPY is None:
        import pyoffload

        _MEMCPY = pyoffload.memcpy
    return _MEMCPY


_MEMCPY: Any = None


def _in_place_memory(device: Any) -> bool:
    """Whether rank 0's allocations on ``device`` (DEVICE memory) are memory this process may read
    and write at their address: the host backend's, and a device's own where its backend says so
    (``Device.host_addressable``: PoCL's CPU devices), unless ``PYOFFLOAD_MPI_IN_PLACE=0``.
    Rank 0 then copies to and from it by cross-memory attach as to host memory, and this rank
    receives into and sends from it directly: no staging buffer, no device copy."""
    from pyoffload import AllocKind

    return bool(device.host_memory) or (device_in_place() and device.host_addressable(AllocKind.DEVICE))


def _host_memory(address: int) -> memoryview | None:
    """The memory from ``address`` to the end of its allocation, when this process may read and
    write it at its address (host memory, or a device's memory its backend says is the host's)."""
    import pyoffload

    info = pyoffload.mem_info(address)
    device = info.device
    if device is None:
        return None
    if not device.host_memory and not (device_in_place() and device.host_addressable(info.kind)):
        return None
    return memoryview((ctypes.c_char * (info.size - info.offset)).from_address(address)).cast("B")


def _piece(size: int) -> int:
    """The pieces a staged copy of ``size`` bytes to or from a device's own memory moves in, each
    overlapping the next one's other leg: about a quarter of the copy, 256 KiB to one chunk,
    whole pages."""
    return max(256 << 10, min(CHUNK, size // 4)) & ~4095


def _post(start: Any, view: memoryview, peer: int, mpi_tag: int) -> list[Any]:
    """Every chunk (:func:`.protocol.chunks`) of ``view`` posted at once with ``Isend`` or ``Irecv``."""
    byte = _byte()
    if len(view) <= CHUNK:
        return [start([view, byte], peer, mpi_tag)]
    return [start([view[offset : offset + length], byte], peer, mpi_tag) for offset, length in chunks(len(view), CHUNK)]


def _receive_all(comm: Any, view: memoryview, peer: int, mpi_tag: int, check: Any = None) -> None:
    """Receive ``view`` from ``peer``, sent as :func:`.protocol.chunks`, all chunks posted at once."""
    wait_all(_post(comm.Irecv, view, peer, mpi_tag), check)


class _Side:
    """A side of a copy between two servers in progress: its requests, the memory they use, what
    to do once they completed, and when to give up on the peer."""

    __slots__ = ("requests", "view", "then", "deadline")

    def __init__(self, requests: list[Any], view: memoryview | None, limit: float, then: Any = None) -> None:
        self.requests, self.view, self.then = requests, view, then
        self.deadline = time.monotonic() + limit


_SIDES_AT_ONCE = 4
"""Sides of copies between servers a pass of the main loop tests..."""
_ALL_SIDES_EVERY = 5e-3
"""... and how often it tests them all (seconds)."""

STAGED_NOW_UP_TO = 256 << 10
"""Staged copies up to this size are made in the main loop, blocking, when their queue has nothing
in flight (``Server._staged_now``)."""

BUSY_TURNS = 64
"""Turns the main loop tests for the next request at once while a queue of its rank runs work."""
BUSY_CEILING = 1e-3
"""Its longest sleep then."""
"""The servers' ``sys.setswitchinterval``."""

_RPC = frozenset(name[4:] for name in dir(Server) if name.startswith("rpc_"))


def _requests() -> Any:
    from mpi4py import MPI

    return MPI.Request


def _byte() -> Any:
    from mpi4py import MPI

    return MPI.BYTE
