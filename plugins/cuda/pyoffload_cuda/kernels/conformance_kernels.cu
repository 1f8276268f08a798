// The conformance suite's "kernels" program for the CUDA backend (the host backend's
// conformance_kernels.c is the reference).  Kernels take their element count n explicitly and
// ignore threads at or beyond it.  They are C++ functions: pyoffload-cuda reads each kernel's
// signature from its mangled name and lists it under its plain name.
//
// Local memory: CUDA has no local-pointer kernel parameters.  A parameter of type
// `pyoffload_local *` receives a LocalMemory argument as a byte offset into the launch's dynamic
// shared memory, whose size is the sum of all LocalMemory arguments (see docs/backends/cuda.md).
#include <stdint.h>

struct pyoffload_local;
extern __shared__ __align__(16) unsigned char pyoffload_dynamic_shared[];

__device__ static inline void *local_memory(pyoffload_local *offset) {
    return pyoffload_dynamic_shared + (uintptr_t)offset;
}

__device__ int32_t counter = 0;
__device__ int32_t table[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

__device__ static inline int64_t global_id() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }

__device__ static inline bool first_thread() {
    return blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0 &&
           threadIdx.y == 0 && threadIdx.z == 0;
}

__global__ void noop() {}

__global__ void iota_i32(int32_t *out, int32_t n, int32_t base) {
    int64_t i = global_id();
    if (i < n) out[i] = base + (int32_t)i;
}

__global__ void axpy_f32(float *y, const float *x, float a, int32_t n) {
    int64_t i = global_id();
    if (i < n) y[i] += a * x[i];
}

__global__ void scalars(double *out, int8_t a, int16_t b, int32_t c, int64_t d, float e, double f,
                        uint8_t g, uint16_t h, uint32_t k, uint64_t m) {
    if (!first_thread()) return;
    out[0] = a; out[1] = b; out[2] = c; out[3] = (double)d; out[4] = e; out[5] = f;
    out[6] = g; out[7] = h; out[8] = k; out[9] = (double)m;
}

__global__ void local_reverse(int32_t *out, const int32_t *in, pyoffload_local *scratch_offset, int32_t n,
                              int32_t block) {
    int32_t *scratch = (int32_t *)local_memory(scratch_offset);
    int64_t g = (int64_t)blockIdx.x * block;
    int32_t l = threadIdx.x;
    int64_t len = n - g < block ? n - g : block;
    if (l < block) scratch[l] = l < len ? in[g + l] : 0;
    __syncthreads();
    if (l < len) out[g + l] = scratch[block - 1 - l];
}

__global__ void bump(int32_t *out) {
    if (!first_thread()) return;
    counter += 1;
    out[0] = counter;
}

__global__ void sleep_spin(int64_t *out, int64_t iterations) {
    if (!first_thread()) return;
    volatile int64_t sink = 0;
    for (int64_t i = 0; i < iterations; i++) sink += i;
    out[0] = iterations;
}
