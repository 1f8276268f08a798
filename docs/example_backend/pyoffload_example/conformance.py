"""The conformance suite's two programs in this backend's source language (Python), as specified in
``docs/plugin-guide.md`` ("The conformance programs").  ``conformance_images_impl`` prefixes each
with the image header.  Names such as ``kernel`` and ``mem`` are the device library that
``load_binary_impl`` puts in every image's namespace."""

KERNELS = """
import time

counter = global_var("i4", [0])
table = global_var("i4", range(16))


@kernel
def noop() -> None:
    pass


@kernel
def iota_i32(out: "ptr", n: "i32", base: "i32") -> None:
    mem(out, "i4", n)[:] = base + np.arange(n, dtype=np.int32)


@kernel
def axpy_f32(y: "ptr", x: "ptr", a: "f32", n: "i32") -> None:
    y = mem(y, "f4", n)
    y += a * mem(x, "f4", n)


@kernel
def scalars(out: "ptr", a: "i8", b: "i16", c: "i32", d: "i64", e: "f32", f: "f64",
            g: "u8", h: "u16", k: "u32", m: "u64") -> None:
    mem(out, "f8", 10)[:] = [a, b, c, d, e, f, g, h, k, m]


@kernel
def local_reverse(out: "ptr", src: "ptr", scratch: "local", n: "i32", block: "i32") -> None:
    out, src, scratch = mem(out, "i4", n), mem(src, "i4", n), scratch.view(np.int32)
    for g in range(0, n, block):
        length = min(n - g, block)
        scratch[:] = 0
        scratch[:length] = src[g:g + length]
        out[g:g + length] = scratch[block - 1::-1][:length]


@kernel
def bump(out: "ptr") -> None:
    counter[0] += 1
    mem(out, "i4", 1)[0] = counter[0]


@kernel
def sleep_spin(out: "ptr", iterations: "i64") -> None:
    time.sleep(iterations * 1e-8)  # stands in for a busy loop of that many iterations
    mem(out, "i8", 1)[0] = iterations
"""

CTOR_DTOR = """
ctor_value = global_var("i4", [0])
ctor_runs = global_var("i4", [0])
dtor_out = global_var("u8", [0])  # where the destructor reports: a pointer, 0 for none


@constructor
def init() -> None:
    ctor_value[0] = 42
    ctor_runs[0] += 1


@destructor
def fini() -> None:
    if dtor_out[0]:
        mem(dtor_out[0], "i4", 2)[:] = [215, ctor_runs[0]]


@kernel
def get_state(out: "ptr") -> None:
    mem(out, "i4", 2)[:] = [ctor_value[0], ctor_runs[0]]


@kernel
def set_dtor_out(p: "ptr") -> None:
    dtor_out[0] = p
"""
