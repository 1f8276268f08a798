"""pyoffload's AMD GPU backend over hip-python.

Registered in the ``pyoffload.plugins`` entry-point group as ``amdgpu``; the hooks are in
:mod:`pyoffload_amdgpu.plugin`.  Importing this package never loads the HIP runtime.
"""

__version__ = "0.1.0"
