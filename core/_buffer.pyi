class BufferBase:
    """Memory at an address, exported through the buffer protocol when host-accessible."""

    ptr: int
    _nbytes: int
    _exportable: bool
    _readonly: bool
    @property
    def _exports(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...
