"""One process of the cross-backend move test (test_cross_backend_waits.py): an array library moves
arrays around the host device and every OpenCL device, each move ordered on the target's queue
after the source's (``record`` / ``wait_events`` across queues, queue-ordered copies), with work
in flight on every queue while it does.  Exits 0 once every result matched numpy.

    python move_between_backends.py ROUNDS SEED
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

import arraylib  # noqa: E402
import pyoffload  # noqa: E402


def main(rounds: int, seed: int) -> int:
    devices = [d for d in pyoffload.devices() if d.backend in arraylib.BACKENDS]
    backends = {d.backend for d in devices}
    if "host" not in backends or "opencl" not in backends:
        print(f"needs the host device and an OpenCL device, got {[d.id for d in devices]}")
        return 3
    rng = random.Random(seed)
    n = 4096
    x = np.arange(n, dtype=np.float32)
    for r in range(rounds):
        # one array per device, then a chain of moves through all of them, every step doing work
        arrays = [arraylib.asarray(x + i, d) for i, d in enumerate(devices)]
        expect = [x + i for i in range(len(devices))]
        for _ in range(12):
            i, j = rng.sample(range(len(devices)), 2)
            moved = arrays[i].to(devices[j])
            arrays[j] = moved * 2.0 + arrays[j]
            expect[j] = expect[i] * 2.0 + expect[j]
            arrays[i] = arrays[i] * 0.5
            expect[i] = expect[i] * 0.5
            if rng.random() < 0.3:  # a read-back in the middle: a wait on one queue
                k = rng.randrange(len(devices))
                np.testing.assert_allclose(arrays[k].numpy(), expect[k], rtol=1e-5)
        for got, want in zip(arrays, expect):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
    pyoffload.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
