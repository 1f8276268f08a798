// The conformance suite's "ctor_dtor" program.  LLVM's AMDGPUCtorDtorLowering pass gathers the
// constructor and destructor into the kernels "amdgcn.device.init" / "amdgcn.device.fini".

#define EXPORT __attribute__((visibility("default")))

EXPORT global int ctor_value = 0;
EXPORT global int ctor_runs = 0;
EXPORT global int *global dtor_out = 0;

__attribute__((constructor)) void conformance_ctor(void) {
  // Volatile: otherwise GlobalOpt folds the constructor into the initialisers (no init kernel).
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
