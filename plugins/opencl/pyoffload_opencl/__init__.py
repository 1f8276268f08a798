"""pyoffload-opencl: pyoffload's OpenCL backend, over pyopencl.

Pointers are shared-virtual-memory (SVM) addresses: DEVICE memory is coarse-grain SVM, HOST
and MANAGED memory fine-grain buffer SVM.  Images are OpenCL C source, SPIR 1.2 bitcode or the
device's own program binaries; see docs/backends/opencl.md for the conventions (global
constructors and destructors, the program state block).  The hooks live in
:mod:`pyoffload_opencl.plugin`, registered in the ``pyoffload.plugins`` entry-point group.
"""
