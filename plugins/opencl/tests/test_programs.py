"""Programs: the state block (shared globals), constructors/destructors, symbols, signatures."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, SymbolKind
from pyoffload_opencl.images import program_scope_variables
from pyoffload_opencl.plugin import DEFAULT_PRIORITY, _FINI_RE, _INIT_RE, _ordered


def test_globals_live_in_the_state_block_shared_by_all_kernels(dev, kernels, queue) -> None:
    counter = kernels.global_variable("counter")
    table = kernels.global_variable("table")
    assert (counter.size, table.size) == (4, 64)
    assert table.read(np.int32).tolist() == list(range(16))  # pyoffload_state_init ran
    block = kernels.handle.state
    assert block.base <= counter.address < block.base + block.size
    assert block.base in kernels.handle.context.allocations  # a real SVM allocation
    counter.write(np.int32(41).tobytes())
    out = dev.alloc(4, AllocKind.MANAGED)
    queue.launch(kernels.kernel("bump"), 1, 1, [out]).wait()
    assert np.frombuffer(ctypes.string_at(out.ptr, 4), np.int32)[0] == 42
    assert counter.read(np.int32)[0] == 42


def test_each_program_has_its_own_block(dev, conformance_source, queue) -> None:
    out = dev.alloc(4)
    with dev.load_program(conformance_source["kernels"]) as a, dev.load_program(conformance_source["kernels"]) as b:
        for _ in range(3):
            queue.launch(a.kernel("bump"), 1, 1, [out])
        queue.wait()
        assert a.global_variable("counter").read(np.int32)[0] == 3
        assert b.global_variable("counter").read(np.int32)[0] == 0
        base_a, svms = a.handle.state.base, a.handle.context.allocations
        assert base_a in svms
    assert base_a not in svms  # unloading released the block


def test_symbols_list_kernels_and_state_variables(kernels) -> None:
    symbols = {s.name: s for s in kernels.symbols()}
    assert symbols["bump"].kind is SymbolKind.KERNEL
    assert (symbols["counter"].kind, symbols["counter"].size) == (SymbolKind.GLOBAL, 4)
    assert (symbols["table"].kind, symbols["table"].size) == (SymbolKind.GLOBAL, 64)


PLAIN_GLOBALS = """
global int g;
kernel void write_global(int v) { g = v; }
kernel void read_global(global int *out) { out[0] = g; }
"""

STATE_GLOBALS = """
typedef struct { int g; } pyoffload_state_t;
constant char names[] = "g";
kernel void pyoffload_state_layout(global ulong *layout) {
    layout[0] = 1; layout[1] = sizeof(pyoffload_state_t); layout[2] = 1; layout[3] = 0; layout[4] = 4;
    global char *s = (global char *)(layout + 5);
    for (int i = 0; i < (int)sizeof(names); ++i) s[i] = names[i];
}
kernel void write_global(int v, global pyoffload_state_t *pyoffload_state) { pyoffload_state->g = v; }
kernel void read_global(global int *out, global pyoffload_state_t *pyoffload_state) { out[0] = pyoffload_state->g; }
"""


def test_plain_program_scope_globals_are_refused_where_kernels_would_not_share_them(dev) -> None:
    # PoCL 3.1 gives write_global and read_global a copy of g each: read_global would never see
    # what write_global wrote.  The program is refused, naming the variable, by both paths.
    assert not dev.info["opencl.program_scope_globals"]
    for load in (lambda: dev.load_program(PLAIN_GLOBALS.encode()), lambda: dev.build_program(PLAIN_GLOBALS)):
        with pytest.raises(pyoffload.UnsupportedError) as err:
            load()
        assert "'g'" in str(err.value) and "pyoffload_state" in str(err.value)


def test_state_block_globals_are_shared_by_every_kernel(dev, queue) -> None:
    out = dev.alloc(4, AllocKind.MANAGED)
    with dev.load_program(STATE_GLOBALS.encode()) as prog:
        queue.launch(prog.kernel("write_global"), 1, 1, [np.int32(1234)])
        queue.launch(prog.kernel("read_global"), 1, 1, [out]).wait()
        assert np.frombuffer(ctypes.string_at(out.ptr, 4), np.int32)[0] == 1234
        assert prog.global_variable("g").read(np.int32)[0] == 1234
        with pytest.raises(pyoffload.OffloadError) as err:
            prog.global_variable("read_global")
        assert err.value.errc is pyoffload.Errc.SYMBOL_KIND


@pytest.mark.parametrize(
    "source,names",
    [
        ("global int a, b[2] = {1, 2}; global float *p;", ["a", "b", "p"]),
        ("int plain = 3; __global struct S { int x; } s;", ["plain", "s"]),
        ("kernel void k(global int *o) { static int calls; o[0] = calls++; }", ["calls"]),
        ("constant int c[2] = {1, 2}; __constant float f = 1.0f;", []),
        ("typedef struct { int a; } T; int helper(int x); kernel void k(global T *t) { t->a = 1; }", []),
        ('#define N 4\n// global int commented;\n/* global int x; */ constant char s[] = "global int y;";', []),
        ("kernel __attribute__((reqd_work_group_size(1, 1, 1))) void k(global int *o) { o[0] = 1; }", []),
        ("global int aligned __attribute__((aligned(16)));", ["aligned"]),
    ],
)
def test_program_scope_variables_are_found_in_source(source: str, names: list[str]) -> None:
    assert program_scope_variables(source) == names


def test_malformed_layout_is_invalid_binary_and_leaks_nothing(dev) -> None:
    src = b"kernel void pyoffload_state_layout(global ulong *layout) { layout[0] = 7; }\n"
    svms = dev.default_context.handle.allocations
    before = dict(svms)
    with pytest.raises(pyoffload.InvalidBinaryError) as err:
        dev.load_program(src)
    assert "ABI version 7" in str(err.value)
    assert svms == before


ORDER_SOURCE = b"""
typedef struct { int n; int log[8]; global int *out; } pyoffload_state_t;
#define STATE global pyoffload_state_t *pyoffload_state
constant char names[] = "n log out";
kernel void pyoffload_state_layout(global ulong *layout) {
    layout[0] = 1; layout[1] = sizeof(pyoffload_state_t); layout[2] = 3;
    layout[3] = __builtin_offsetof(pyoffload_state_t, n);   layout[4] = 4;
    layout[5] = __builtin_offsetof(pyoffload_state_t, log); layout[6] = 32;
    layout[7] = __builtin_offsetof(pyoffload_state_t, out); layout[8] = 8;
    global char *s = (global char *)(layout + 9);
    for (int i = 0; i < (int)sizeof(names); ++i) s[i] = names[i];
}
static void note(STATE, int id) { pyoffload_state->log[pyoffload_state->n++] = id; }
/* Constructors log their priority; destructors copy the whole log out, so the last one to run
   shows every destructor that ran before it, and that the block was still alive then. */
static void fini(STATE, int id) {
    note(pyoffload_state, id);
    global int *out = pyoffload_state->out;
    if (out) for (int i = 0; i < 8; ++i) out[i] = pyoffload_state->log[i];
}
kernel void pyoffload_init_100(STATE) { note(pyoffload_state, 100); }
kernel void pyoffload_init(STATE)     { note(pyoffload_state, 65535); }
kernel void pyoffload_init_5(STATE)   { note(pyoffload_state, 5); }
kernel void pyoffload_fini_5(STATE)   { fini(pyoffload_state, -5); }
kernel void pyoffload_fini(STATE)     { fini(pyoffload_state, -65535); }
kernel void pyoffload_fini_100(STATE) { fini(pyoffload_state, -100); }
kernel void set_out(global int *p, STATE) { pyoffload_state->out = p; }
"""


def test_constructors_and_destructors_run_in_priority_order(dev, queue) -> None:
    out = dev.alloc(32, AllocKind.MANAGED)
    ctypes.memset(out.ptr, 0, 32)
    prog = dev.load_program(ORDER_SOURCE)
    # Constructors: lowest priority first; the unnumbered one has the default, 65535.
    assert prog.global_variable("log").read(np.int32).tolist()[:3] == [5, 100, 65535]
    queue.launch(prog.kernel("set_out"), 1, 1, [out]).wait()
    block, svms = prog.handle.state.base, prog.handle.context.allocations
    prog.unload()
    # Destructors: the reverse; they ran before the block was released (they read it).
    log = np.frombuffer(ctypes.string_at(out.ptr, 32), np.int32).tolist()
    assert log[:6] == [5, 100, 65535, -65535, -100, -5]
    assert block not in svms


def test_priority_rule() -> None:
    names = [
        "pyoffload_fini_7",
        "k",
        "pyoffload_init_0010",
        "pyoffload_init_9",
        "pyoffload_init",
        "pyoffload_init_x",
        "pyoffload_fini",
        "my_pyoffload_init_1",
    ]
    assert _ordered(names, _INIT_RE, reverse=False) == ("pyoffload_init_9", "pyoffload_init_0010", "pyoffload_init")
    assert _ordered(names, _FINI_RE, reverse=True) == ("pyoffload_fini", "pyoffload_fini_7")
    assert DEFAULT_PRIORITY == 65535


def test_signatures_from_kernel_arg_info(dev, kernels) -> None:
    assert kernels.kernel("scalars").signature == (
        "ptr",
        "i8",
        "i16",
        "i32",
        "i64",
        "f32",
        "f64",
        "u8",
        "u16",
        "u32",
        "u64",
    )
    assert kernels.kernel("local_reverse").signature == ("ptr", "ptr", "local", "i32", "i32")
    assert kernels.kernel("bump").signature == ("ptr",)  # hidden state parameter left out
    assert kernels.kernel("noop").signature == ()
    src = (
        b"kernel void vec(global float4 *p, float4 v) { p[0] = v; }\n"
        b"kernel void mixed(global int *p, ulong n, constant int *c, double d) { p[0] = n + c[0]; }\n"
    )
    with dev.load_program(src) as prog:
        assert prog.kernel("vec").signature is None  # a vector parameter has no pyoffload kind
        assert prog.kernel("mixed").signature == ("ptr", "u64", "ptr", "f64")


def test_wrong_argument_count_is_refused_before_enqueue(kernels, queue) -> None:
    with pytest.raises(pyoffload.InvalidArgumentError):
        queue.launch(kernels.kernel("iota_i32"), 1, 1, [np.int32(1)])
