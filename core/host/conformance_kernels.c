/* The conformance suite's "kernels" program for the host backend (the reference version).
 * Kernels declared with PYOFFLOAD_KERNEL are data-parallel (run per range of work-groups on
 * several threads; see pyoffload_host.h); the others are called once per launch and loop over
 * their n elements themselves. */
#include <stdint.h>

#include <pyoffload_host.h>

int32_t counter = 0;
int32_t table[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

void noop(void) {}

PYOFFLOAD_KERNEL(iota_i32)(PYOFFLOAD_GROUPS, int32_t *out, int32_t n, int32_t base) {
    PYOFFLOAD_FOR_EACH_GROUP {
        PYOFFLOAD_FOR_EACH_ITEM {
            uint64_t i = pyoffload_global_id(0);
            if (i < (uint64_t)(int64_t)n) out[i] = base + (int32_t)i;
        }
    }
}

PYOFFLOAD_KERNEL(axpy_f32)(PYOFFLOAD_GROUPS, float *y, const float *x, float a, int32_t n) {
    PYOFFLOAD_FOR_EACH_GROUP {
        PYOFFLOAD_FOR_EACH_ITEM {
            uint64_t i = pyoffload_global_id(0);
            if (i < (uint64_t)(int64_t)n) y[i] += a * x[i];
        }
    }
}

/* Once per launch: a single work-item's job. */
void scalars(double *out, int8_t a, int16_t b, int32_t c, int64_t d, float e, double f,
             uint8_t g, uint16_t h, uint32_t k, uint64_t m) {
    out[0] = a; out[1] = b; out[2] = c; out[3] = (double)d; out[4] = e; out[5] = f;
    out[6] = g; out[7] = h; out[8] = k; out[9] = (double)m;
}

/* Each group reverses its block of `in` through local memory: two item loops, one barrier. */
PYOFFLOAD_KERNEL(local_reverse)(PYOFFLOAD_GROUPS, int32_t *out, const int32_t *in, int32_t *scratch, int32_t n,
                                int32_t block) {
    PYOFFLOAD_FOR_EACH_GROUP {
        int64_t g = (int64_t)pyoffload_group_id(0) * block;
        int64_t len = n - g < block ? n - g : block;
        PYOFFLOAD_FOR_EACH_ITEM {
            int64_t l = (int64_t)pyoffload_local_id(0);
            if (l < block) scratch[l] = l < len ? in[g + l] : 0;
        }
        /* barrier */
        PYOFFLOAD_FOR_EACH_ITEM {
            int64_t l = (int64_t)pyoffload_local_id(0);
            if (l < len) out[g + l] = scratch[block - 1 - l];
        }
    }
}

void bump(int32_t *out) {
    counter += 1;
    out[0] = counter;
}

void sleep_spin(int64_t *out, int64_t iterations) {
    volatile int64_t sink = 0;
    for (int64_t i = 0; i < iterations; i++) sink += i;
    out[0] = iterations;
}

/* Items below n write 1 to out[i]; the item whose global id is `at` traps (none when at < 0). */
PYOFFLOAD_KERNEL(trap)(PYOFFLOAD_GROUPS, int32_t *out, int32_t n, int32_t at) {
    PYOFFLOAD_FOR_EACH_GROUP {
        PYOFFLOAD_FOR_EACH_ITEM {
            uint64_t i = pyoffload_global_id(0);
            if (at >= 0 && i == (uint64_t)at) pyoffload_trap();
            if (i < (uint64_t)(int64_t)n) out[i] = 1;
        }
    }
}
