// The conformance suite's "ctor_dtor" program.  The constructor and destructor are ordinary
// OpenCL C functions marked constructor/destructor: LLVM's AMDGPU back end (the
// AMDGPUCtorDtorLowering pass) gathers llvm.global_ctors / llvm.global_dtors into the kernels
// "amdgcn.device.init" and "amdgcn.device.fini", the entry points every LLVM offload runtime
// launches after load and before unload.

#define EXPORT __attribute__((visibility("default")))

EXPORT global int ctor_value = 0;
EXPORT global int ctor_runs = 0;
EXPORT global int *global dtor_out = 0;

__attribute__((constructor)) void conformance_ctor(void) {
  // The volatile access keeps LLVM's GlobalOpt from evaluating the constructor at compile time
  // (it would fold it into the initialisers and drop amdgcn.device.init altogether).
  volatile global int *runs = &ctor_runs;
  ctor_value = 42;
  *runs = *runs + 1;
}

__attribute__((destructor)) void conformance_dtor(void) {
  global int *p = dtor_out;
  if (p) {
    p[0] = 215;
    p[1] = ctor_runs;
  }
}

kernel void get_state(global int *out) {
  out[0] = ctor_value;
  out[1] = ctor_runs;
}

kernel void set_dtor_out(global int *p) { dtor_out = p; }
