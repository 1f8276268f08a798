/* The conformance suite's "kernels" program for the host backend (the reference version).
 * Host kernels are called once per launch: each loops over its n elements itself. */
#include <stdint.h>

int32_t counter = 0;
int32_t table[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

void noop(void) {}

void iota_i32(int32_t *out, int32_t n, int32_t base) {
    for (int32_t i = 0; i < n; i++) out[i] = base + i;
}

void axpy_f32(float *y, const float *x, float a, int32_t n) {
    for (int32_t i = 0; i < n; i++) y[i] += a * x[i];
}

void scalars(double *out, int8_t a, int16_t b, int32_t c, int64_t d, float e, double f,
             uint8_t g, uint16_t h, uint32_t k, uint64_t m) {
    out[0] = a; out[1] = b; out[2] = c; out[3] = (double)d; out[4] = e; out[5] = f;
    out[6] = g; out[7] = h; out[8] = k; out[9] = (double)m;
}

void local_reverse(int32_t *out, const int32_t *in, int32_t *scratch, int32_t n, int32_t block) {
    for (int32_t g = 0; g < n; g += block) {
        int32_t len = n - g < block ? n - g : block;
        for (int32_t l = 0; l < block; l++) scratch[l] = l < len ? in[g + l] : 0;
        for (int32_t l = 0; l < len; l++) out[g + l] = scratch[block - 1 - l];
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
