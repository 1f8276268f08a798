class BufferBase:
    """Memory at an address, exported through the buffer protocol when host-accessible."""

    ptr: int
    nbytes: int
    exportable: bool
    readonly: bool
    @property
    def export_count(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...
