"""One process of the cross-backend move test (test_cross_backend_waits.py): an array library moves
arrays around the host device and every OpenCL device, each move ordered on the target's queue
after the source's (``record`` / ``wait_events`` across queues, queue-ordered copies), with work
in flight on every queue while it does, and host functions on one queue that wait for events of
another.  Exits 0 once every result matched numpy.

    python move_between_backends.py ROUNDS SEED
"""

from __future__ import annotations

import os
import random
import sys
import threading

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

import arraylib  # noqa: E402
import pyoffload  # noqa: E402


def crossed_wait(a: arraylib.Array, b: arraylib.Array) -> None:
    """b's queue waits for a copy on a's queue (an event with no marker of its own); a's queue's
    next host function waits for b's work after that wait.  No cycle: the copy completes alone."""
    qa, qb = a._state.queue, b._state.queue
    scratch = arraylib.empty(a.shape, a.dtype, a.device)
    copied = qa.memcpy(scratch.alloc, a.alloc, a.size * a.dtype.itemsize)
    ready = threading.Event()
    later: list[pyoffload.Event] = []
    qa.launch_host_function(lambda: ready.wait(30) and later[0].wait())
    qb.wait_events(copied)
    later.append(qb.launch_host_function(lambda: None))
    ready.set()


def main(rounds: int, seed: int) -> int:
    devices = [d for d in pyoffload.devices() if d.backend in arraylib.BACKENDS]
    backends = {d.backend for d in devices}
    if "host" not in backends or "opencl" not in backends:
        print(f"needs the host device and an OpenCL device, got {[d.id for d in devices]}")
        return 3
    rng = random.Random(seed)
    n = 4096
    x = np.arange(n, dtype=np.float32)
    for _ in range(rounds):
        # one array per device, then a chain of moves through all of them, every step doing work
        arrays = [arraylib.asarray(x + i, d) for i, d in enumerate(devices)]
        expect = [x + i for i in range(len(devices))]
        for _ in range(12):
            i, j = rng.sample(range(len(devices)), 2)
            source = arrays[i]._state.queue
            if rng.random() < 0.5:  # a host function on the target waits for the source's work so far
                arrays[j]._state.queue.launch_host_function(source.record().wait)
            elif rng.random() < 0.5:  # ... or for one of its operations, without a marker of its own
                arrays[j]._state.queue.launch_host_function(
                    (arrays[i] * 1.0)._state.queue.launch_host_function(lambda: None).wait
                )
            if rng.random() < 0.3:
                crossed_wait(arrays[i], arrays[j])
            moved = arrays[i].to(devices[j])
            arrays[j] = moved * 2.0 + arrays[j]
            expect[j] = expect[i] * 2.0 + expect[j]
            arrays[i] = arrays[i] * 0.5
            expect[i] = expect[i] * 0.5
            if rng.random() < 0.3:  # a read-back in the middle: a wait on one queue
                k = rng.randrange(len(devices))
                np.testing.assert_allclose(arrays[k].numpy(), expect[k], rtol=1e-5)
        for got, want in zip(arrays, expect, strict=True):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
    pyoffload.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
