/* arraylib's kernels for OpenCL: one work-item per element, guarded against the last, partial
 * work-group.  The parameters are those of kernels.c, so one launch serves both backends. */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

#define KERNELS(T, S)                                                                         \
    kernel void add_##S(global T *out, global const T *a, global const T *b, long n) {       \
        long i = get_global_id(0);                                                          \
        if (i < n) out[i] = a[i] + b[i];                                                     \
    }                                                                                        \
    kernel void mul_##S(global T *out, global const T *a, global const T *b, long n) {       \
        long i = get_global_id(0);                                                          \
        if (i < n) out[i] = a[i] * b[i];                                                     \
    }                                                                                        \
    kernel void scale_##S(global T *out, global const T *a, T s, long n) {                  \
        long i = get_global_id(0);                                                          \
        if (i < n) out[i] = a[i] * s;                                                        \
    }                                                                                        \
    /* one work-group: strided partial sums, then a tree in local memory (block: power of 2) */ \
    kernel void sum_##S(global T *out, global const T *a, long n, local T *scratch) {      \
        long l = get_local_id(0), block = get_local_size(0);                                 \
        T acc = 0;                                                                           \
        for (long i = l; i < n; i += block) acc += a[i];                                     \
        scratch[l] = acc;                                                                    \
        barrier(CLK_LOCAL_MEM_FENCE);                                                        \
        for (long s = block / 2; s > 0; s /= 2) {                                            \
            if (l < s) scratch[l] += scratch[l + s];                                         \
            barrier(CLK_LOCAL_MEM_FENCE);                                                    \
        }                                                                                    \
        if (l == 0) out[0] = scratch[0];                                                     \
    }

KERNELS(float, f32)
KERNELS(double, f64)
