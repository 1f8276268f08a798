/* arraylib's kernels for the host backend.  A host kernel is an exported C function that the
 * backend calls once per launch with the launch's arguments: it loops over its n elements itself
 * (the grid and block are not passed).  -g keeps DWARF, from which pyoffload reads these
 * signatures and checks every launch's arguments. */
#include <stdint.h>

#define KERNELS(T, S)                                                                \
    void add_##S(T *out, const T *a, const T *b, int64_t n) {                      \
        for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];                       \
    }                                                                               \
    void mul_##S(T *out, const T *a, const T *b, int64_t n) {                      \
        for (int64_t i = 0; i < n; i++) out[i] = a[i] * b[i];                       \
    }                                                                               \
    void scale_##S(T *out, const T *a, T s, int64_t n) {                           \
        for (int64_t i = 0; i < n; i++) out[i] = a[i] * s;                          \
    }                                                                               \
    /* scratch is the launch's LocalMemory: a fresh buffer per launch on this backend */ \
    void sum_##S(T *out, const T *a, int64_t n, T *scratch) {                      \
        (void)scratch;                                                              \
        T acc = 0;                                                                  \
        for (int64_t i = 0; i < n; i++) acc += a[i];                                \
        out[0] = acc;                                                               \
    }

KERNELS(float, f32)
KERNELS(double, f64)
