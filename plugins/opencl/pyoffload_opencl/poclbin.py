"""A structural check of PoCL program binaries (``poclbin``), before ``clCreateProgramWithBinary``.

PoCL 3.1 trusts every length in the file: a truncated or corrupted binary fails an ``assert`` or
reads past the buffer and takes the process down.  This walks the whole layout (format version 9,
the one PoCL 3.1 writes), checking that every length lies inside the file and that the records
add up exactly, so anything malformed is an ``InvalidBinaryError`` instead.

Layout: a 77-byte header (magic, device id, version, kernel count, flags, build hash), then the
program's bitcode as one file record prefixed by its size, then one record per kernel: sizes,
name, metadata and argument info, then the kernel's files (path, content) up to the record's end.
"""

from __future__ import annotations

import struct

from pyoffload.backend import InvalidBinaryError

VERSION = 9
_HEADER = struct.Struct("<8sQIIQ")  # magic, device id, version, kernel count, flags
_HEADER_SIZE = 77
_KERNEL = struct.Struct("<QQI")  # record size, files size, argument info size
_COUNTS = struct.Struct("<II")  # arguments, locals
_ARG = struct.Struct("<IIQII")  # access, address and type qualifiers, type, type size
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_MAX_KERNELS = 1 << 16


class _Reader:
    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def take(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.end:
            raise InvalidBinaryError(f"poclbin: {what} at byte {self.pos} runs past its record (ends at {self.end})")
        self.pos += n
        return self.pos - n

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[int, ...]:
        return fmt.unpack_from(self.data, self.take(fmt.size, what))

    def u32(self, what: str) -> int:
        return self.unpack(_U32, what)[0]

    def u64(self, what: str) -> int:
        return self.unpack(_U64, what)[0]

    def string(self, what: str, nonempty: bool = False) -> None:
        n = self.u32(f"{what} length")
        if nonempty and n == 0:
            raise InvalidBinaryError(f"poclbin: empty {what} at byte {self.pos}")
        self.take(n, what)


def check(data: bytes) -> None:
    """Raise ``InvalidBinaryError`` unless ``data`` is a well-formed version-9 PoCL binary."""
    if len(data) < _HEADER_SIZE:
        raise InvalidBinaryError(f"poclbin: {len(data)} bytes is shorter than the {_HEADER_SIZE}-byte header")
    _, _, version, kernels, _ = _HEADER.unpack_from(data)
    if version != VERSION:
        raise InvalidBinaryError(f"poclbin: format version {version}; this backend reads version {VERSION} (PoCL 3.1)")
    if not 0 < kernels <= _MAX_KERNELS:
        raise InvalidBinaryError(f"poclbin: {kernels} kernels")
    r = _Reader(data, _HEADER_SIZE, len(data))
    size = r.u64("program bitcode record size")
    bitcode = _Reader(data, r.take(size, "program bitcode"), r.pos)
    bitcode.string("bitcode path", nonempty=True)
    bitcode.string("bitcode", nonempty=True)
    if bitcode.pos != bitcode.end:
        raise InvalidBinaryError("poclbin: the program bitcode record does not add up")
    for k in range(kernels):
        start = r.pos
        record, files, arginfo = r.unpack(_KERNEL, f"kernel {k} sizes")
        if files > record:
            raise InvalidBinaryError(f"poclbin: kernel {k}: files ({files} bytes) exceed its record ({record})")
        r.take(record - _KERNEL.size, f"kernel {k}")
        meta = _Reader(data, start + _KERNEL.size, start + record - files)
        meta.string(f"kernel {k} name", nonempty=True)
        args, locals_ = meta.unpack(_COUNTS, f"kernel {k} counts")
        meta.take(24 + 8 * locals_, f"kernel {k} work-group sizes")
        meta.string(f"kernel {k} attributes")
        meta.u64(f"kernel {k} metadata flags")
        arg_start = meta.pos
        for a in range(args):
            meta.unpack(_ARG, f"kernel {k} argument {a}")
            meta.string(f"kernel {k} argument {a} name")
            meta.string(f"kernel {k} argument {a} type name")
        if meta.pos != meta.end or meta.pos - arg_start != arginfo:
            raise InvalidBinaryError(f"poclbin: kernel {k}: metadata does not add up")
        body = _Reader(data, meta.end, start + record)
        while body.pos < body.end:
            body.string(f"kernel {k} file path", nonempty=True)
            body.string(f"kernel {k} file", nonempty=True)
    if r.pos != len(data):
        raise InvalidBinaryError(f"poclbin: {len(data) - r.pos} bytes after the last kernel")
