"""The ``mpi`` backend: every device of every other MPI rank, as a device of rank 0.

Run the application with ``mpirun -n N python -m pyoffload_mpi app.py``: rank 0 runs it, ranks
1..N-1 serve their own devices (:mod:`.server`).  Here, on rank 0, each hook turns into a
request to the device's rank (:mod:`.client`):

* **Devices and platforms.**  One platform per local platform of each rank (short name
  ``r<rank>-<platform>``, so ids read ``mpi-r1-pocl-cpu-0``); a remote device is a CPU, GPU or
  accelerator here (even a server's host device: its memory is not rank 0's).  Only DEVICE memory
  exists (``memory_kinds``): HOST and MANAGED memory must be readable at their address on rank 0.
* **Addresses** carry their rank in the high bits (:func:`.protocol.tag`), so that the generic
  layer's one registry holds every rank's memory without collisions; they are translated back in
  every request, kernel pointer arguments included.
* **Enqueues** send a request and return.  On one machine a copy is that request alone: the
  server that carries it out reads or writes the other rank's memory itself (:mod:`.cma`; rank 0's
  host buffer, or another server's host memory, whose rank takes no part).  Elsewhere copies to a
  server send their bytes in chunks the server copies to the device as they arrive, and copies
  between two ranks go directly between the two servers' MPI messages (``data_exchange_impl``),
  never through rank 0.
* **Events** are recorded on the server's queue; its watcher tells rank 0 when one completes, so
  waiting and querying need no round trip.  Host functions and cross-queue waits across ranks use
  the generic layer's emulation (host functions run on rank 0), waits within one rank are native.
* **Failures** travel as the same class and errc, prefixed with the rank.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from pyoffload.backend import (
    AllocKind,
    DeviceDesc,
    DeviceType,
    MemoryConnection,
    NoDevicesError,
    PlatformDesc,
    KERNEL_ATTRIBUTE_KEYS,
    SymbolDesc,
    SymbolKind,
    UnsupportedError,
    hookimpl,
)

from . import cma
from . import session as _session
from .client import Link, RemoteEvent, RemoteQueue, raise_failure
from .protocol import local_address, tag, untag

HOOK_API = (1, 2)  # the contract this module was written for (a literal: it must not follow upgrades)

_lock = threading.Lock()  # the id and image bookkeeping below
_sent_images: set[tuple[int, bytes]] = set()  # (rank, digest) of images a server keeps


class RemoteDevice:
    """A device of a server, as its rank described it."""

    __slots__ = ("rank", "index", "name", "info", "compiler_id", "target", "known", "images", "host_memory")

    def __init__(self, rank: int, described: dict[str, Any]) -> None:
        self.rank, self.index, self.name = rank, described["index"], described["name"]
        # Its memory is plain memory of the serving process (another rank may read and write it).
        self.host_memory: bool = described.get("host_memory", False)
        info = {k: v for k, v in described["info"].items() if "." not in k}
        info.update({k: None for k in ("name", "vendor", "type", "backend", "platform")})
        info = {k: v for k, v in info.items() if v is not None}
        info["memory_kinds"] = ("DEVICE",)
        info["host_addressable_kinds"] = ()  # (memory of another process, whatever it is there)
        info["mpi.rank"] = rank
        info["mpi.host"] = described["host"]
        info["mpi.pid"] = described["pid"]
        info["mpi.remote_id"] = described["id"]
        info["mpi.remote_backend"] = described["backend"]
        # Whether the rank's MPI library could move CUDA device memory itself (not used yet).
        info["mpi.cuda_aware"] = bool(described.get("cuda_aware", False))
        info.update({f"mpi.remote.{k}": v for k, v in described["info"].items() if "." in k})
        self.info = info
        self.compiler_id: str | None = described["compiler_id"]
        # The remote device's build target ("host:x86_64"): images for it are built on this rank
        # by the backend of that name, with the compiler the caller chose (pyoffload.build_image).
        self.target: str | None = described.get("target")
        self.known: dict[str, str] | None = None
        self.images: dict[str, bytes] | None = None


class RemoteContext:
    __slots__ = ("cid", "rank")

    def __init__(self, cid: int, rank: int) -> None:
        self.cid, self.rank = cid, rank


class RemoteProgram:
    __slots__ = ("pid", "rank", "symbols")

    def __init__(self, pid: int, rank: int, symbols: list[tuple[str, str, int]]) -> None:
        self.pid, self.rank = pid, rank
        self.symbols = [SymbolDesc(name, SymbolKind[kind], size) for name, kind, size in symbols]


class RemoteKernel:
    __slots__ = ("kid", "rank", "signature", "attributes")

    def __init__(self, kid: int, rank: int, signature: Sequence[str] | None, attributes: dict[str, Any]) -> None:
        self.kid, self.rank, self.signature, self.attributes = kid, rank, signature, attributes


def _link() -> Link:
    current = _session.CURRENT
    assert current is not None and current.link is not None  # init_impl made sure
    return current.link  # type: ignore[no-any-return]


# -- lifecycle ------------------------------------------------------------------------------


@hookimpl
def init_impl() -> Sequence[PlatformDesc]:
    current = _session.CURRENT
    if current is None:
        raise NoDevicesError("not an MPI job started with `mpirun -n N python -m pyoffload_mpi app.py`")
    if current.rank != 0:
        raise NoDevicesError(f"rank {current.rank} serves its devices to rank 0")
    if current.size < 2:
        raise NoDevicesError("the MPI job has one rank: no other rank serves devices")
    link: Link = current.link
    platforms: list[PlatformDesc] = []
    failures = []
    serving = []
    for rank in range(1, current.size):
        try:
            described = link.call(rank, "hello")
        except Exception as exc:
            failures.append(f"rank {rank}: {exc}")
            continue
        serving.append(rank)
        grouped: dict[str, list[dict[str, Any]]] = {}
        for d in described:
            grouped.setdefault(d["platform"], []).append(d)
        for name, devices in grouped.items():
            first = devices[0]
            descs = tuple(
                DeviceDesc(f"{d['name']} (rank {rank})", d["vendor"], _device_type(d["type"]), RemoteDevice(rank, d))
                for d in devices
            )
            platforms.append(
                PlatformDesc(
                    f"rank {rank}: {name}",
                    first["vendor"],
                    first["platform_version"],
                    descs,
                    handle=rank,
                    short_name=f"r{rank}-{first['platform_short']}",
                )
            )
    if not platforms:
        raise NoDevicesError("no serving rank has a device" + (": " + "; ".join(failures) if failures else ""))
    try:
        link.meet(serving)
    except Exception:
        link.reach = set()  # copies go through MPI messages
    return platforms


def _device_type(remote: str) -> DeviceType:
    kind = DeviceType(remote)
    return DeviceType.CPU if kind is DeviceType.HOST else kind


@hookimpl
def deinit_impl() -> None:
    link = _link()
    for rank in range(1, link.size):
        if rank not in link.dead:
            link.call(rank, "deinit")
    with _lock:
        _sent_images.clear()


@hookimpl
def device_info_impl(device: RemoteDevice) -> dict[str, Any]:
    return dict(device.info)


@hookimpl
def context_create_impl(devices: Sequence[RemoteDevice]) -> RemoteContext:
    link = _link()
    context = RemoteContext(next(link.ids), devices[0].rank)
    link.call(context.rank, "context", context.cid, [d.index for d in devices])
    return context


@hookimpl
def context_destroy_impl(context: RemoteContext) -> None:
    _link().call(context.rank, "context_destroy", context.cid)


# -- memory ---------------------------------------------------------------------------------


@hookimpl
def data_alloc_impl(context: RemoteContext, device: RemoteDevice | None, size: int, kind: AllocKind) -> int:
    if device is None or kind is not AllocKind.DEVICE:
        raise UnsupportedError(f"memory of another MPI rank is DEVICE memory only, not {kind.name}")
    return tag(device.rank, _link().call(device.rank, "alloc", context.cid, device.index, size))


@hookimpl
def data_free_impl(context: RemoteContext, device: RemoteDevice | None, ptr: int, kind: AllocKind) -> None:
    rank, address = untag(ptr)
    _link().call(rank, "free", address)


# Copies to and from a server on rank 0's machine are one request each: the server reads or writes
# rank 0's buffer itself (cma.py), which the generic layer keeps until the copy has completed.
# Elsewhere the bytes travel in MPI messages.
#
# Copies rank 0 makes itself.  A synchronous copy is an operation on the context's internal queue
# and, at once, the queue's synchronisation.  When the server's side is host memory that rank 0
# may read and write too, and everything enqueued on the queue before has completed, the copy is
# deferred to that synchronisation, which makes it on rank 0 (one process_vm_writev or readv): no
# request, no server to be scheduled, no reply to wait for.  Any other operation on the queue
# first (the event a queued copy records, a launch, another copy, a query) sends the deferred
# copy to the server ahead of itself, as the request it would have been, so queued copies stay
# asynchronous and in queue order.  ``RemoteQueue.moving`` is held while a deferred copy is
# taken and made or sent: a synchronisation that finds one being made waits for it.
#
# Small copies the server makes, deferred the same way.  A copy of at most ``SMALL`` bytes that
# rank 0 cannot make itself (the server's side is a device's own memory, or no cross-memory
# attach reaches the server) is deferred too, as the request it will be (to a server: its bytes
# inside the request, not in a message of their own).  The synchronisation then sends it with
# the event it waits for in one message (``then_record``): a synchronous small copy is one
# request and one reply, as MPI's own round trip is, and the server makes it at once.


# A synchronous copy to a server larger than this is made by both: rank 0 writes its first half
# while the server reads the second half from rank 0.  (Measured on one machine, rank 0 writing a
# whole 4 or 16 MiB copy alone reached 0.53-0.60x of MPI's own Send, the server reading it alone
# 0.75-0.89x once the request and the synchronisation are counted; 1 and 2 MiB written by rank 0
# 0.94-1.04x.)
WRITE_HERE_UP_TO = 2 << 20

SMALL = 64 << 10
"""Copies up to this size that rank 0 cannot make itself are deferred to the synchronisation, and
their bytes travel inside the request (see above)."""


def _defer(
    link: Link, queue: RemoteQueue, message: tuple[Any, ...], here: tuple[bool, int, int, int] | None = None
) -> bool:
    """Defer a copy to the queue's next synchronisation when the queue has nothing in flight (see
    above); it counts as enqueued.  ``message`` is its request; ``here`` (write, server address,
    local address, size) where rank 0 may make it itself instead."""
    if queue.settled != queue.enqueued or queue.error is not None or queue.profiling:
        return False
    if here is not None and (not queue.device.host_memory or (0, queue.rank) not in link.reach):
        return False
    queue.enqueued += 1
    queue.deferred = (message, here, queue.enqueued)
    return True


def _cma_request(queue: RemoteQueue, write: bool, address: int, local: int, size: int) -> tuple[Any, ...]:
    """The request that makes the server read a copy to it (``write``) from rank 0's ``local``, or
    write a copy from it there."""
    return ("submit_from" if write else "retrieve_to", queue.qid, address, size, local)


_MOVING_NOW = frozenset({"submit_from", "retrieve_to"})
"""Requests whose bytes move the moment the server takes them (cross-memory attach): a wait for them
spins.  By messages, rank 0's progress moves the bytes, and its wait keeps the usual schedule."""


def _post_copy(link: Link, queue: RemoteQueue, message: tuple[Any, ...]) -> None:
    if message[0] in _MOVING_NOW:
        queue.copying = True  # (a wait for it spins: the bytes move now)
    link.post(queue.rank, message)


def _send_deferred(link: Link, queue: RemoteQueue) -> None:
    """Other work comes on the queue: send its deferred copy to the server first."""
    with queue.moving:
        deferred, queue.deferred = queue.deferred, None
        if deferred is not None:
            _post_copy(link, queue, deferred[0])


def _make_deferred(link: Link, queue: RemoteQueue) -> RemoteEvent | None:
    """The queue is synchronised: make its deferred copy here (or wait for the thread making it),
    or send it with the event the synchronisation waits for, which is returned."""
    with queue.moving:
        deferred, queue.deferred = queue.deferred, None
        if deferred is None:
            return None
        message, here, number = deferred
        if here is not None:
            try:
                cma.move(here[0], queue.device.info["mpi.pid"], *here[1:])
            except OSError:  # (the server went away, say): the request reports what happened
                pass
            else:
                if queue.settled == number - 1:
                    queue.settled = number
                return None
        if message[0] in _MOVING_NOW:
            queue.copying = True
        return link.record_with(queue, message)


@hookimpl
def data_submit_impl(device: RemoteDevice, queue: RemoteQueue, dst: int, src: memoryview, size: int) -> None:
    link = queue.link
    if queue.deferred is not None:
        _send_deferred(link, queue)
    if (queue.rank, 0) in link.reach:
        link.bytes_sent += size
        address, local = local_address(dst, queue.rank), cma.address(src)
        here = size if size <= WRITE_HERE_UP_TO else (size // 2) & ~4095
        if queue.device.host_memory:
            if _defer(link, queue, _cma_request(queue, True, address, local, here), (True, address, local, here)):
                if here == size:
                    return
                address, local, size = address + here, local + here, size - here
        elif size <= SMALL and _defer(link, queue, _cma_request(queue, True, address, local, size)):
            return
        queue.enqueued += 1
        _post_copy(link, queue, _cma_request(queue, True, address, local, size))
        return
    address = local_address(dst, queue.rank)
    if size <= SMALL:
        # The bytes inside the request: one message, and the caller's buffer is free at once.
        message = ("put", queue.qid, address, bytes(src[:size]))
        link.bytes_sent += size
        if not _defer(link, queue, message):
            queue.enqueued += 1
            _post_copy(link, queue, message)
        return
    queue.enqueued += 1
    link.post(queue.rank, ("submit", queue.qid, address, size), src[:size])


@hookimpl
def data_retrieve_impl(device: RemoteDevice, queue: RemoteQueue, dst: memoryview, src: int, size: int) -> None:
    link = queue.link
    if queue.deferred is not None:
        _send_deferred(link, queue)
    address = local_address(src, queue.rank)
    if (queue.rank, 0) in link.reach:
        link.bytes_received += size
        local = cma.address(dst)
        message = _cma_request(queue, False, address, local, size)
        here = (False, address, local, size) if queue.device.host_memory else None
        if (here is None and size > SMALL) or not _defer(link, queue, message, here):
            queue.enqueued += 1
            _post_copy(link, queue, message)
        return
    with _lock:
        mpi_tag = link.tags.take()
    link.receive(queue, mpi_tag, dst[:size])  # before the request: the bytes move as soon as they are sent
    message = ("retrieve", queue.qid, address, size, mpi_tag)
    if size > SMALL or not _defer(link, queue, message):
        queue.enqueued += 1
        link.post(queue.rank, message)


@hookimpl
def data_exchange_impl(
    src_device: RemoteDevice, src: int, dst_device: RemoteDevice, dst: int, size: int, queue: RemoteQueue
) -> None:
    link = _link()
    if queue.deferred is not None:
        _send_deferred(link, queue)
    queue.enqueued += 1
    src_rank, src_address = untag(src)
    dst_rank, dst_address = untag(dst)
    if src_rank == dst_rank:
        link.post(queue.rank, ("copy", queue.qid, dst_address, src_address, size))
        return
    queue.copying = True
    # The rank of the queue orders the copy on it; the other side takes part as soon as it hears,
    # or not at all: on one machine the queue's rank reads or writes the other's memory itself.
    sending = queue.rank == src_rank
    other_rank = dst_rank if sending else src_rank
    here = src_address if sending else dst_address
    there = dst_address if sending else src_address
    if (queue.rank, other_rank) in link.reach and (dst_device if sending else src_device).host_memory:
        queue.copying = True  # (a wait for it spins: the bytes move now)
        link.post(queue.rank, ("xfer_cma", queue.qid, "write" if sending else "read", other_rank, there, here, size))
        return
    mine, other = ("send", "recv") if sending else ("recv", "send")
    with _lock:
        mpi_tag = link.tags.take()
    # Both halves in one step: each server may block on its half until the other's is posted,
    # which is safe as long as every server sees the halves of all copies in the same order.
    link.post_together(
        [
            (other_rank, ("xfer", None, other, queue.rank, mpi_tag, there, size)),
            (queue.rank, ("xfer", queue.qid, mine, other_rank, mpi_tag, here, size)),
        ]
    )


@hookimpl
def data_fill_impl(device: RemoteDevice, queue: RemoteQueue, ptr: int, pattern: bytes, size: int) -> None:
    link = _link()
    if queue.deferred is not None:
        _send_deferred(link, queue)
    queue.enqueued += 1
    link.post(queue.rank, ("fill", queue.qid, local_address(ptr, queue.rank), bytes(pattern), size))


@hookimpl
def memory_connection_impl(
    context_a: RemoteContext, device_a: RemoteDevice | None, context_b: RemoteContext, device_b: RemoteDevice | None
) -> MemoryConnection | None:
    if device_a is None or device_b is None or (context_a is context_b and device_a is device_b):
        return None  # the generic answer
    return MemoryConnection.MIGRATABLE  # servers copy to each other, and within a rank across contexts


# -- programs -------------------------------------------------------------------------------


@hookimpl
def load_binary_impl(context: RemoteContext, device: RemoteDevice, image: bytes) -> RemoteProgram:
    link = _link()
    import hashlib  # on the first load: OpenSSL's start-up is not discovery's to pay

    digest = hashlib.sha256(image).digest()
    key = (device.rank, digest)
    with _lock:
        send = key not in _sent_images
    pid = next(link.ids)
    symbols = link.call(device.rank, "load", pid, context.cid, device.index, digest, bytes(image) if send else None)
    with _lock:
        _sent_images.add(key)
    return RemoteProgram(pid, device.rank, symbols)


@hookimpl
def unload_binary_impl(device: RemoteDevice, program: RemoteProgram) -> None:
    _link().call(program.rank, "unload", program.pid)


@hookimpl
def get_symbols_impl(device: RemoteDevice, program: RemoteProgram) -> Sequence[SymbolDesc]:
    return program.symbols


@hookimpl
def get_kernel_impl(device: RemoteDevice, program: RemoteProgram, name: str) -> RemoteKernel:
    link = _link()
    kid = next(link.ids)
    signature, attributes = link.call(program.rank, "kernel", program.pid, name, kid)
    return RemoteKernel(kid, program.rank, signature, attributes)


@hookimpl
def get_global_impl(device: RemoteDevice, program: RemoteProgram, name: str) -> tuple[int, int]:
    address, size = _link().call(program.rank, "global", program.pid, name)
    return tag(program.rank, address), size


@hookimpl
def kernel_signature_impl(device: RemoteDevice, kernel: RemoteKernel) -> Sequence[str] | None:
    return kernel.signature


@hookimpl
def kernel_attributes_impl(device: RemoteDevice, kernel: RemoteKernel) -> dict[str, Any]:
    return {k if k in _STANDARD_ATTRIBUTES else f"mpi.remote.{k}": v for k, v in kernel.attributes.items()}


_STANDARD_ATTRIBUTES = frozenset(KERNEL_ATTRIBUTE_KEYS)


@hookimpl
def kernel_packer_impl(
    device: RemoteDevice, kernel: RemoteKernel, kinds: tuple[str, ...]
) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    rank = kernel.rank
    pointers = [i for i, kind in enumerate(kinds) if kind == "ptr"]

    def pack(values: tuple[Any, ...]) -> tuple[Any, ...]:
        out = list(values)
        for i in pointers:
            out[i] = local_address(out[i], rank)
        return tuple(out)

    return pack


@hookimpl
def compile_impl(device: RemoteDevice, source: str, options: tuple[str, ...]) -> bytes:
    return _link().call(device.rank, "compile", device.index, source, tuple(options))  # type: ignore[no-any-return]


@hookimpl
def build_target_impl(device: RemoteDevice) -> str | None:
    return device.target


@hookimpl
def compiler_id_impl(device: RemoteDevice) -> str | None:
    return None if device.compiler_id is None else f"{device.info['mpi.remote_backend']} {device.compiler_id}"


# -- queues, launches and events -------------------------------------------------------------


@hookimpl
def queue_create_impl(context: RemoteContext, device: RemoteDevice, profiling: bool) -> RemoteQueue:
    link = _link()
    queue = RemoteQueue(link, next(link.ids), device.rank, device, profiling)
    link.call(device.rank, "queue", queue.qid, context.cid, device.index, profiling)
    link.queues[queue.qid] = queue
    return queue


@hookimpl
def queue_destroy_impl(device: RemoteDevice, queue: RemoteQueue) -> None:
    link = _link()
    if queue.deferred is not None:
        _send_deferred(link, queue)
    link.queues.pop(queue.qid, None)
    link.call(queue.rank, "queue_destroy", queue.qid)


@hookimpl
def queue_synchronize_impl(device: RemoteDevice, queue: RemoteQueue) -> None:
    link = queue.link
    count = queue.enqueued
    event = None
    if queue.deferred is not None or queue.moving.locked():
        event = _make_deferred(link, queue)
    if event is None:
        if queue.settled == queue.enqueued and queue.error is None:
            return  # nothing in flight: no round trip
        count = queue.enqueued
        event = link.record(queue, kept=False)
    link.wait_event(event, synchronising=True)
    if count > queue.settled:
        queue.settled = count


@hookimpl
def queue_query_impl(device: RemoteDevice, queue: RemoteQueue) -> bool:
    link = _link()
    if queue.deferred is not None:
        _send_deferred(link, queue)
    if queue.settled == queue.enqueued and queue.error is None:
        return True
    # Without a round trip: an event recorded after the last enqueue answers, once it is back.
    probe = queue.probe
    if probe is not None and probe[0] == queue.enqueued:
        return probe[1].done.is_set()
    queue.probe = (queue.enqueued, link.record(queue, kept=False))
    return False


@hookimpl
def launch_impl(
    device: RemoteDevice,
    queue: RemoteQueue,
    kernel: RemoteKernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: tuple[Any, ...],
) -> None:
    link = _link()
    if queue.deferred is not None:
        _send_deferred(link, queue)
    queue.enqueued += 1
    queue.computing = True
    link.post(queue.rank, ("launch", queue.qid, kernel.kid, grid, block, args))


@hookimpl
def launch_prepare_impl(
    device: RemoteDevice,
    queue: RemoteQueue,
    kernel: RemoteKernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: tuple[Any, ...],
) -> Callable[[], None]:
    link = _link()
    enqueue = link.poster(queue.rank, ("launch", queue.qid, kernel.kid, grid, block, args))

    def launch() -> None:
        if queue.deferred is not None:
            _send_deferred(link, queue)
        queue.enqueued += 1
        queue.computing = True
        enqueue()

    return launch


@hookimpl
def queue_wait_events_impl(device: RemoteDevice, queue: RemoteQueue, events: Sequence[RemoteEvent]) -> bool | None:
    if any(e.rank != queue.rank or not e.kept for e in events):
        return None  # across ranks: the generic layer holds the queue's later work back
    eids = [e.eid for e in events if e.stored or not e.done.is_set()]  # the others were complete when recorded
    if eids:
        link = _link()
        if queue.deferred is not None:
            _send_deferred(link, queue)
        queue.enqueued += 1
        link.post(queue.rank, ("wait_events", queue.qid, eids))
    return True


@hookimpl
def event_record_impl(device: RemoteDevice, queue: RemoteQueue) -> RemoteEvent:
    link = _link()
    if queue.deferred is not None:
        _send_deferred(link, queue)
    return link.record(queue, kept=True)


@hookimpl
def event_wait_impl(device: RemoteDevice, event: RemoteEvent) -> None:
    _link().wait_event(event)


@hookimpl
def event_query_impl(device: RemoteDevice, event: RemoteEvent) -> bool:
    if not event.done.is_set():
        _link().check(event.rank)
        return False
    if event.error is not None:
        raise_failure(event)
    return True


@hookimpl
def event_release_impl(device: RemoteDevice, event: RemoteEvent) -> None:
    _link().release(event)


@hookimpl
def event_elapsed_impl(device: RemoteDevice, start: RemoteEvent, end: RemoteEvent) -> float:
    return _link().call(end.rank, "elapsed", start.eid, end.eid)  # type: ignore[no-any-return]


# -- the conformance suite ------------------------------------------------------------------


@hookimpl
def conformance_images_impl(device: RemoteDevice) -> dict[str, bytes] | None:
    if device.images is None:
        device.images = _link().call(device.rank, "images", device.index)
    return device.images


@hookimpl
def known_failures_impl(device: RemoteDevice) -> dict[str, str]:
    if device.known is None:
        link = _link()
        device.known = {**link.call(device.rank, "known_failures", device.index), **_KNOWN_FAILURES}
    return device.known


_OUTSIDE_THE_JOB = "the test runs a child interpreter outside the MPI job, which has no rank to serve it"
_KNOWN_FAILURES: dict[str, str] = {
    "test_shutdown_with_live_objects": _OUTSIDE_THE_JOB,
    "test_interpreter_exit_with_live_objects": _OUTSIDE_THE_JOB,
}
"""Conformance tests that cannot pass on a device of another rank, with the reason."""
