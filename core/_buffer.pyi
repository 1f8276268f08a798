class BufferBase:
    """Memory at an address, exported through the buffer protocol when host-accessible."""

    ptr: int
    _nbytes: int
    _exportable: bool
    _readonly: bool
    @property
    def _exports(self) -> int: ...
