"""Framework-generated C on the host device, the way tinygrad's CPU back end generates it: one plain
C function per kernel, parallel over a group index (tinygrad's ``core_id``), with no wrapper and
no pyoffload macros: the trailing ``const pyoffload_launch *ctx`` parameter makes it
data-parallel, and the host backend runs its work-groups on its native thread pool.

    python examples/generated_c.py [n]     # an n x n matmul, a fused elementwise kernel, an MLP step

The generator renders each kernel in two dialects from one body: C for the host backend and
OpenCL C (``get_group_id``) for an OpenCL device, so the same kernels run on both (the
benchmarks compare them).  Every work-group is one work-item that loops over its share, as
tinygrad's CPU kernels do.  The generator is deliberately small: it shows the shape of generated
code, not an optimiser.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable

import numpy as np

import pyoffload


@dataclasses.dataclass(frozen=True)
class Dialect:
    """How a generated kernel is spelled for one kind of device."""

    prelude: str
    qualifier: str  # before a kernel's return type
    space: str  # before a pointer parameter's type
    context: str  # a trailing parameter carrying the group index, if the dialect has one
    group: str  # the group index, as an expression

    def kernel(self, name: str, params: str, body: str) -> str:
        params = params.replace("PTR ", self.space)
        return f"{self.qualifier}void {name}({params}{self.context}) {{\n    const int gid = {self.group};\n{body}}}\n"


HOST = Dialect(
    "#include <math.h>\n#include <pyoffload_host.h>\n",
    "",
    "",
    ", const pyoffload_launch *ctx",
    "(int)ctx->group_linear_id",
)
OPENCL = Dialect(
    "#define expf exp\n#define logf log\n#define fmaxf fmax\n", "kernel ", "global ", "", "(int)get_group_id(0)"
)


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One generated kernel and the work-groups it is launched with (one work-item each)."""

    name: str
    groups: int
    params: str
    body: str


def gemm(
    name: str, m: int, n: int, k: int, a: Callable[[str, str], str], b: Callable[[str, str], str], bias: bool = False
) -> Kernel:
    """``c[i, j] = sum_k a(i, k) * b(k, j) (+ bias[j])`` for an m x n ``c``: each group a band of
    rows, accumulated row by row in i-k-j order so that the inner loop runs along ``b``'s rows."""
    rows = max(1, -(-m // 16))  # 16 bands or fewer: several per thread
    bias_param = ", const PTR float *restrict bias" if bias else ""
    init = "bias[j]" if bias else "0.0f"
    body = f"""    for (int i = gid * {rows}; i < (gid + 1) * {rows} && i < {m}; i++) {{
        float acc[{n}];
        for (int j = 0; j < {n}; j++) acc[j] = {init};
        for (int kk = 0; kk < {k}; kk++) {{
            const float aik = {a("i", "kk")};
            for (int j = 0; j < {n}; j++) acc[j] += aik * {b("kk", "j")};
        }}
        for (int j = 0; j < {n}; j++) c[i * {n} + j] = acc[j];
    }}
"""
    params = f"PTR float *restrict c, const PTR float *restrict a, const PTR float *restrict b{bias_param}"
    return Kernel(name, -(-m // rows), params, body)


def elementwise(name: str, size: int, params: str, expr: str, per_group: int = 4096) -> Kernel:
    """``out[i] = expr`` over ``size`` elements, ``per_group`` to a work-group."""
    body = f"""    for (int i = gid * {per_group}; i < (gid + 1) * {per_group} && i < {size}; i++) out[i] = {expr};
"""
    return Kernel(name, -(-size // per_group), f"PTR float *restrict out, {params}", body)


def row_reduce(name: str, rows: int, cols: int, init: str, step: str) -> Kernel:
    """``out[r] = fold(step, init, x[r, :])`` (``step`` combines ``acc`` and ``v``): one group per row."""
    body = f"""    float acc = {init};
    for (int j = 0; j < {cols}; j++) {{
        const float v = x[gid * {cols} + j];
        acc = {step};
    }}
    out[gid] = acc;
"""
    return Kernel(name, rows, "PTR float *restrict out, const PTR float *restrict x", body)


def column_sum(name: str, rows: int, cols: int) -> Kernel:
    """``out[j] = sum_r x[r, j]``: bands of columns, rows outermost so that loads run along rows."""
    per_group = max(1, -(-cols // 4))
    body = f"""    const int lo = gid * {per_group}, hi = lo + {per_group} < {cols} ? lo + {per_group} : {cols};
    for (int j = lo; j < hi; j++) out[j] = 0.0f;
    for (int r = 0; r < {rows}; r++)
        for (int j = lo; j < hi; j++) out[j] += x[r * {cols} + j];
"""
    return Kernel(name, -(-cols // per_group), "PTR float *restrict out, const PTR float *restrict x", body)


def render(dialect: Dialect, kernels: list[Kernel]) -> str:
    return dialect.prelude + "".join(dialect.kernel(k.name, k.params, k.body) for k in kernels)


def matmul_kernel(n: int) -> Kernel:
    """``c = a @ b`` for n x n float32."""
    return gemm("matmul", n, n, n, lambda i, k: f"a[{i} * {n} + {k}]", lambda k, j: f"b[{k} * {n} + {j}]")


def fused_kernel(size: int) -> Kernel:
    """``out = relu(x * w + bias)``, elementwise."""
    params = "const PTR float *restrict x, const PTR float *restrict w, float bias"
    return elementwise("fused", size, params, "fmaxf(x[i] * w[i] + bias, 0.0f)")


# -- a tiny MLP's training step -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mlp:
    """A two-layer perceptron (``in_ -> hidden (ReLU) -> out``, softmax cross-entropy) and its SGD
    step as 19 generated kernels launched in sequence: forward, loss, backward, update."""

    batch: int = 64
    in_: int = 256
    hidden: int = 128
    out: int = 10
    lr: float = 0.1

    def kernels(self) -> list[tuple[Kernel, tuple[str, ...]]]:
        """The step's kernels, in launch order, each with the buffers (and scalars) it takes."""
        nb, ni, nh, no = self.batch, self.in_, self.hidden, self.out
        cin = "const PTR float *restrict"
        sgd = f"{cin} g, float lr"
        return [
            (gemm("fc1", nb, nh, ni, lambda b, i: f"a[{b} * {ni} + {i}]", lambda i, h: f"b[{i} * {nh} + {h}]", True),
             ("hpre", "x", "w1", "b1")),
            (elementwise("relu", nb * nh, f"{cin} x", "fmaxf(x[i], 0.0f)"), ("h", "hpre")),
            (gemm("fc2", nb, no, nh, lambda b, h: f"a[{b} * {nh} + {h}]", lambda h, o: f"b[{h} * {no} + {o}]", True),
             ("logits", "h", "w2", "b2")),
            (row_reduce("rowmax", nb, no, "-INFINITY", "fmaxf(acc, v)"), ("rmax", "logits")),
            (elementwise("shift_exp", nb * no, f"{cin} x, {cin} m", f"expf(x[i] - m[i / {no}])"),
             ("e", "logits", "rmax")),
            (row_reduce("rowsum", nb, no, "0.0f", "acc + v"), ("rsum", "e")),
            (elementwise("probs", nb * no, f"{cin} e, {cin} s", f"e[i] / s[i / {no}]"), ("p", "e", "rsum")),
            (Kernel("loss", 1, f"PTR float *restrict out, {cin} p, const PTR int *restrict y",
                    f"    float acc = 0.0f;\n    for (int b = 0; b < {nb}; b++) acc -= logf(p[b * {no} + y[b]]);\n"
                    f"    out[gid] = acc / {nb};\n"), ("loss", "p", "y")),
            (elementwise("dlogits", nb * no, f"{cin} p, const PTR int *restrict y",
                         f"(p[i] - (y[i / {no}] == i % {no} ? 1.0f : 0.0f)) / {nb}"), ("dl", "p", "y")),
            (gemm("dw2", nh, no, nb, lambda h, b: f"a[{b} * {nh} + {h}]", lambda b, o: f"b[{b} * {no} + {o}]"),
             ("gw2", "h", "dl")),
            (column_sum("db2", nb, no), ("gb2", "dl")),
            (gemm("dh", nb, nh, no, lambda b, o: f"a[{b} * {no} + {o}]", lambda o, h: f"b[{h} * {no} + {o}]"),
             ("dh", "dl", "w2")),
            (elementwise("relu_back", nb * nh, f"{cin} d, {cin} x", "x[i] > 0.0f ? d[i] : 0.0f"),
             ("dhpre", "dh", "hpre")),
            (gemm("dw1", ni, nh, nb, lambda i, b: f"a[{b} * {ni} + {i}]", lambda b, h: f"b[{b} * {nh} + {h}]"),
             ("gw1", "x", "dhpre")),
            (column_sum("db1", nb, nh), ("gb1", "dhpre")),
            (elementwise("sgd_w1", ni * nh, sgd, "out[i] - lr * g[i]"), ("w1", "gw1", "lr")),
            (elementwise("sgd_b1", nh, sgd, "out[i] - lr * g[i]"), ("b1", "gb1", "lr")),
            (elementwise("sgd_w2", nh * no, sgd, "out[i] - lr * g[i]"), ("w2", "gw2", "lr")),
            (elementwise("sgd_b2", no, sgd, "out[i] - lr * g[i]"), ("b2", "gb2", "lr")),
        ]  # fmt: skip

    def shapes(self) -> dict[str, tuple[int, ...]]:
        nb, ni, nh, no = self.batch, self.in_, self.hidden, self.out
        return {
            "x": (nb, ni), "y": (nb,), "w1": (ni, nh), "b1": (nh,), "w2": (nh, no), "b2": (no,),
            "hpre": (nb, nh), "h": (nb, nh), "logits": (nb, no), "rmax": (nb,), "e": (nb, no), "rsum": (nb,),
            "p": (nb, no), "loss": (1,), "dl": (nb, no), "gw2": (nh, no), "gb2": (no,), "dh": (nb, nh),
            "dhpre": (nb, nh), "gw1": (ni, nh), "gb1": (nh,),
        }  # fmt: skip

    def inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Data, labels and initial weights."""
        rng = np.random.default_rng(seed)
        nb, ni, nh, no = self.batch, self.in_, self.hidden, self.out
        return {
            "x": rng.standard_normal((nb, ni)).astype(np.float32),
            "y": rng.integers(0, no, nb).astype(np.int32),
            "w1": (rng.standard_normal((ni, nh)) / np.sqrt(ni)).astype(np.float32),
            "b1": np.zeros(nh, np.float32),
            "w2": (rng.standard_normal((nh, no)) / np.sqrt(nh)).astype(np.float32),
            "b2": np.zeros(no, np.float32),
        }

    def reference(self, v: dict[str, np.ndarray]) -> tuple[float, dict[str, np.ndarray]]:
        """One step in numpy: the loss before it and the updated weights."""
        x, y = v["x"].astype(np.float64), v["y"]
        hpre = x @ v["w1"] + v["b1"]
        h = np.maximum(hpre, 0)
        logits = h @ v["w2"] + v["b2"]
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        loss = float(-np.log(p[np.arange(self.batch), y]).mean())
        dl = (p - np.eye(self.out)[y]) / self.batch
        dhpre = (dl @ v["w2"].T) * (hpre > 0)
        grads = {"w1": x.T @ dhpre, "b1": dhpre.sum(0), "w2": h.T @ dl, "b2": dl.sum(0)}
        return loss, {name: v[name] - self.lr * g for name, g in grads.items()}


class MlpStep:
    """The MLP step's kernels built for ``dev`` and their launches prepared over fresh buffers
    holding ``mlp.inputs()``: ``step()`` runs the 19 prepared launches, then waits (a jitted step,
    as a framework replays it); ``read(name)`` copies a buffer back.  ``options`` go to the
    compiler (a framework's own, such as tinygrad's ``-march=native``)."""

    def __init__(
        self, dev: pyoffload.Device, q: pyoffload.Queue, mlp: Mlp, dialect: Dialect, options: tuple[str, ...] = ()
    ) -> None:
        kernels = mlp.kernels()
        self.q = q
        self.prog = dev.build_program(render(dialect, [k for k, _ in kernels]), options)
        self.shapes = mlp.shapes()
        self.bufs = {name: dev.alloc(4 * int(np.prod(shape))) for name, shape in self.shapes.items()}
        for name, value in mlp.inputs().items():
            pyoffload.memcpy(self.bufs[name], value)
        self.launches = [
            q.prepare(
                self.prog.kernel(k.name),
                k.groups,
                1,
                [np.float32(mlp.lr) if n == "lr" else self.bufs[n] for n in names],
            )
            for k, names in kernels
        ]

    def step(self) -> None:
        for launch in self.launches:
            launch()
        self.q.wait()

    def read(self, name: str) -> np.ndarray:
        out = np.empty(self.shapes[name], np.int32 if name == "y" else np.float32)
        pyoffload.memcpy(out, self.bufs[name])
        return out

    def close(self) -> None:
        for buf in self.bufs.values():
            buf.free()
        self.prog.unload()


def run(n: int = 256) -> dict[str, float]:
    """Build the matmul and fused kernels, run them on the host device, check them against numpy,
    then one MLP step; returns the milliseconds each launch (or step) took, enqueue to completion."""
    dev = pyoffload.host_device()
    size = n * n
    mm, fused = matmul_kernel(n), fused_kernel(size)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    w = rng.standard_normal(size).astype(np.float32)
    times: dict[str, float] = {}
    with dev.build_program(render(HOST, [mm, fused])) as prog, dev.create_queue() as q:
        da, db, dc, dw, dout = (dev.alloc(4 * size) for _ in range(5))
        pyoffload.memcpy(da, a)
        pyoffload.memcpy(db, b)
        pyoffload.memcpy(dw, w)
        matmul, fk = prog.kernel("matmul"), prog.kernel("fused")
        assert matmul.signature == ("ptr", "ptr", "ptr")  # the launch context is not an argument

        t0 = time.perf_counter()
        q.launch(matmul, mm.groups, 1, [dc, da, db]).wait()
        times["matmul"] = (time.perf_counter() - t0) * 1e3
        c = np.empty((n, n), np.float32)
        pyoffload.memcpy(c, dc)
        np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)

        t0 = time.perf_counter()
        q.launch(fk, fused.groups, 1, [dout, dc, dw, np.float32(0.5)]).wait()
        times["fused"] = (time.perf_counter() - t0) * 1e3
        out = np.empty(size, np.float32)
        pyoffload.memcpy(out, dout)
        np.testing.assert_allclose(out, np.maximum(c.ravel() * w + np.float32(0.5), 0), rtol=1e-5, atol=1e-5)
        for alloc in (da, db, dc, dw, dout):
            alloc.free()

        mlp = Mlp()
        run = MlpStep(dev, q, mlp, HOST)
        t0 = time.perf_counter()
        run.step()
        times["mlp_step"] = (time.perf_counter() - t0) * 1e3
        check_mlp_step(mlp, run)
        run.close()
    return times


def check_mlp_step(mlp: Mlp, run: MlpStep) -> None:
    """That one step left the loss and the weights numpy computes."""
    loss, weights = mlp.reference(mlp.inputs())
    np.testing.assert_allclose(run.read("loss")[0], loss, rtol=1e-4)
    for name, want in weights.items():
        np.testing.assert_allclose(run.read(name), want, rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    times = run(n)
    print(
        f"{n}x{n} matmul: {times['matmul']:.2f} ms; fused relu(x * w + b): {times['fused']:.2f} ms; "
        f"MLP step (19 kernels): {times['mlp_step']:.2f} ms (all checked)"
    )
