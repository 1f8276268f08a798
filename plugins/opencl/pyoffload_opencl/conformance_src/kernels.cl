/* The conformance suite's "kernels" program for the OpenCL backend.
 *
 * Same kernels as the host backend's reference version (core/host/conformance_kernels.c), one
 * work-item per element.  The program-wide variables `counter` and `table` live in the program
 * state block (docs/backends/opencl.md): kernels that use them take the hidden last parameter
 * `pyoffload_state`, and `pyoffload_state_layout` tells the backend where each one is. */

typedef struct {
    int counter;
    int table[16];
} pyoffload_state_t;

#define STATE global pyoffload_state_t *pyoffload_state

/* layout[3 + 2i], layout[4 + 2i]: offset and size of variable i. */
#define DESCRIBE(i, field)                                                     \
    layout[3 + 2 * (i)] = __builtin_offsetof(pyoffload_state_t, field);      \
    layout[4 + 2 * (i)] = sizeof(((pyoffload_state_t *)0)->field)

constant char state_names[] = "counter table";

kernel void pyoffload_state_layout(global ulong *layout) {
    layout[0] = 1;                          /* ABI version */
    layout[1] = sizeof(pyoffload_state_t);  /* block size */
    layout[2] = 2;                          /* number of variables */
    DESCRIBE(0, counter);
    DESCRIBE(1, table);
    global char *names = (global char *)(layout + 3 + 2 * 2);
    for (int i = 0; i < (int)sizeof(state_names); ++i) names[i] = state_names[i];
}

/* Initial values (the block starts zero-filled). */
kernel void pyoffload_state_init(STATE) {
    for (int i = 0; i < 16; ++i) pyoffload_state->table[i] = i;
}

kernel void noop(void) {}

kernel void iota_i32(global int *out, int n, int base) {
    int i = get_global_id(0);
    if (i < n) out[i] = base + i;
}

kernel void axpy_f32(global float *y, global const float *x, float a, int n) {
    int i = get_global_id(0);
    if (i < n) y[i] += a * x[i];
}

kernel void scalars(global double *out, char a, short b, int c, long d, float e, double f,
                    uchar g, ushort h, uint k, ulong m) {
    if (get_global_id(0) != 0) return;
    out[0] = a; out[1] = b; out[2] = c; out[3] = (double)d; out[4] = e; out[5] = f;
    out[6] = g; out[7] = h; out[8] = k; out[9] = (double)m;
}

/* Reverses `in` within each work-group of `block` items; a partial last group reads zeros
 * past the end, exactly like the reference. */
kernel void local_reverse(global int *out, global const int *in, local int *scratch, int n,
                          int block) {
    int l = get_local_id(0);
    int g = get_group_id(0) * block;
    int len = min(n - g, block);
    if (l < block) scratch[l] = l < len ? in[g + l] : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (l < len) out[g + l] = scratch[block - 1 - l];
}

kernel void bump(global int *out, STATE) {
    if (get_global_id(0) != 0) return;
    pyoffload_state->counter += 1;
    out[0] = pyoffload_state->counter;
}

kernel void sleep_spin(global long *out, long iterations) {
    if (get_global_id(0) != 0) return;
    volatile long sink = 0;
    for (long i = 0; i < iterations; ++i) sink += i;
    out[0] = iterations;
}
