"""pyoffload's CUDA backend: the ``cuda`` entry point of ``pyoffload.plugins``.

The hooks live in :mod:`pyoffload_cuda.plugin`; importing this package never loads the CUDA
driver.
"""

__all__: list[str] = []
