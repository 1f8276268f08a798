/* The conformance suite's "ctor_dtor" program for the host backend: ELF constructors and
 * destructors, run by the dynamic loader at load (dlopen) and unload (dlclose). */
#include <stdint.h>

int32_t ctor_value = 0;
int32_t ctor_runs = 0;
int32_t *dtor_out = 0;

__attribute__((constructor)) static void init(void) {
    ctor_value = 42;
    ctor_runs += 1;
}

__attribute__((destructor)) static void fini(void) {
    if (dtor_out) {
        dtor_out[0] = 215;
        dtor_out[1] = ctor_runs;
    }
}

void get_state(int32_t *out) {
    out[0] = ctor_value;
    out[1] = ctor_runs;
}

void set_dtor_out(int32_t *p) { dtor_out = p; }
