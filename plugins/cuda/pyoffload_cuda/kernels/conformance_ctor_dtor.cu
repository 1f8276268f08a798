// The conformance suite's "ctor_dtor" program for the CUDA backend.
//
// CUDA C++ has no dynamic initialisation of __device__ variables, so the constructor and
// destructor are written directly as the kernels LLVM's NVPTX target emits for a module's global
// constructors and destructors: nvptx$device$init and nvptx$device$fini (C names; nvcc accepts
// '$' in identifiers).
#include <stdint.h>

__device__ int32_t ctor_value = 0;
__device__ int32_t ctor_runs = 0;
__device__ int32_t *dtor_out = 0;

extern "C" __global__ void nvptx$device$init() {
    ctor_value = 42;
    ctor_runs += 1;
}

extern "C" __global__ void nvptx$device$fini() {
    if (dtor_out) {
        dtor_out[0] = 215;
        dtor_out[1] = ctor_runs;
    }
}

__global__ void get_state(int32_t *out) {
    out[0] = ctor_value;
    out[1] = ctor_runs;
}

__global__ void set_dtor_out(int32_t *p) { dtor_out = p; }
