// The conformance suite's "kernels" program; -nogpulib: only clang's __builtin_amdgcn_* builtins.

// Default visibility puts globals in the dynamic symbol table, where hipModuleGetGlobal looks.
#define EXPORT __attribute__((visibility("default")))
// Without this attribute the backend assumes at most 256 work-items per group.
#define KERNEL kernel __attribute__((amdgpu_flat_work_group_size(1, 1024)))

EXPORT global int counter = 0;
EXPORT global int table[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static inline uint global_id_x(void) {
  return __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() +
         __builtin_amdgcn_workitem_id_x();
}

KERNEL void noop(void) {}

KERNEL void iota_i32(global int *out, int n, int base) {
  uint i = global_id_x();
  if (i < (uint)n) out[i] = base + (int)i;
}

KERNEL void axpy_f32(global float *y, global const float *x, float a, int n) {
  uint i = global_id_x();
  if (i < (uint)n) y[i] += a * x[i];
}

KERNEL void scalars(global double *out, char a, short b, int c, long d, float e, double f,
                    uchar g, ushort h, uint k, ulong m) {
  if (global_id_x() != 0) return;
  out[0] = (double)a;
  out[1] = (double)b;
  out[2] = (double)c;
  out[3] = (double)d;
  out[4] = (double)e;
  out[5] = f;
  out[6] = (double)g;
  out[7] = (double)h;
  out[8] = (double)k;
  out[9] = (double)m;
}

KERNEL void local_reverse(global int *out, global const int *in, local int *scratch, int n,
                          int block) {
  uint l = __builtin_amdgcn_workitem_id_x();
  uint i = global_id_x();
  if (i < (uint)n) scratch[l] = in[i];
  __builtin_amdgcn_s_barrier();
  if (i < (uint)n) out[i] = scratch[block - 1 - (int)l];
}

KERNEL void bump(global int *out) {
  if (global_id_x() != 0) return;
  counter += 1;
  out[0] = counter;
}

KERNEL void sleep_spin(global long *out, long iterations) {
  if (global_id_x() != 0) return;
  for (long it = 0; it < iterations; ++it) __builtin_amdgcn_s_sleep(1);
  out[0] = iterations;
}
