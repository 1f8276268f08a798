/* The conformance suite's "ctor_dtor" program for the OpenCL backend.
 *
 * OpenCL has no global constructors; this backend runs kernels named `pyoffload_init[_N]` after
 * load and `pyoffload_fini[_N]` before unload (docs/backends/opencl.md).  The state they share
 * with `get_state` and `set_dtor_out` lives in the program state block. */

typedef struct {
    int ctor_value;
    int ctor_runs;
    global int *dtor_out;
} pyoffload_state_t;

#define STATE global pyoffload_state_t *pyoffload_state

#define DESCRIBE(i, field)                                                     \
    layout[3 + 2 * (i)] = __builtin_offsetof(pyoffload_state_t, field);      \
    layout[4 + 2 * (i)] = sizeof(((pyoffload_state_t *)0)->field)

constant char state_names[] = "ctor_value ctor_runs dtor_out";

kernel void pyoffload_state_layout(global ulong *layout) {
    layout[0] = 1;
    layout[1] = sizeof(pyoffload_state_t);
    layout[2] = 3;
    DESCRIBE(0, ctor_value);
    DESCRIBE(1, ctor_runs);
    DESCRIBE(2, dtor_out);
    global char *names = (global char *)(layout + 3 + 2 * 3);
    for (int i = 0; i < (int)sizeof(state_names); ++i) names[i] = state_names[i];
}

kernel void pyoffload_init(STATE) {
    pyoffload_state->ctor_value = 42;
    pyoffload_state->ctor_runs += 1;
}

kernel void pyoffload_fini(STATE) {
    global int *out = pyoffload_state->dtor_out;
    if (out) {
        out[0] = 215;
        out[1] = pyoffload_state->ctor_runs;
    }
}

kernel void get_state(global int *out, STATE) {
    out[0] = pyoffload_state->ctor_value;
    out[1] = pyoffload_state->ctor_runs;
}

kernel void set_dtor_out(global int *p, STATE) {
    pyoffload_state->dtor_out = p;
}
