// Kernels of the CUDA benchmarks, the same two the OpenCL and host benchmarks launch.  C++
// linkage on purpose: pyoffload-cuda reads each kernel's parameter types from its mangled name;
// the baselines (pycuda, cuda.core) look the kernels up by that mangled name, read from the PTX.
#include <stdint.h>

__global__ void noop() {}

__global__ void iota_i32(int32_t *out, int32_t n, int32_t base) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = base + (int32_t)i;
}
