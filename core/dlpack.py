"""DLPack's C structures and capsules, through ctypes (no pyoffload objects here).

The exporter builds a ``DLManagedTensor`` (or ``DLManagedTensorVersioned`` for consumers that ask
for DLPack 1.0) over a range of memory and wraps it in a capsule; the memory stays exported until
the consumer calls the tensor's deleter (or the capsule is destroyed unconsumed).  The importer
takes a producer's capsule, renames it "used" (it now owns the tensor) and calls the producer's
deleter when it lets go.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import InvalidArgumentError, UnsupportedError

K_DL_CPU, K_DL_CUDA, K_DL_CUDA_HOST, K_DL_OPENCL, K_DL_ROCM, K_DL_ROCM_HOST, K_DL_EXT_DEV, K_DL_CUDA_MANAGED = (
    1,
    2,
    3,
    4,
    10,
    11,
    12,
    13,
)
VERSION = (1, 0)
READ_ONLY, IS_COPIED = 1, 2


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))),
]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]

_Deleter = DLManagedTensor._fields_[2][1]
_VersionedDeleter = DLManagedTensorVersioned._fields_[2][1]
# The destructor receives the capsule while it is being deallocated: as a raw pointer (wrapping it
# in a Python object there would resurrect it).
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = (ctypes.py_object, ctypes.c_char_p)
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = (ctypes.py_object, ctypes.c_char_p)
_api.PyCapsule_SetDestructor.restype = ctypes.c_int
_api.PyCapsule_SetDestructor.argtypes = (ctypes.c_void_p, ctypes.c_void_p)  # a live capsule, by address
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

_DL_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_NP_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}


def _dl_dtype(dt: np.dtype[Any]) -> DLDataType:
    code = _DL_CODES.get(dt.kind)
    if code is None:
        raise InvalidArgumentError(f"DLPack has no type for numpy dtype {dt}")
    return DLDataType(code, dt.itemsize * 8, 1)


def _np_dtype(dl: DLDataType) -> np.dtype[Any]:
    kind = _NP_KINDS.get(int(dl.code))
    if kind is None or dl.lanes != 1:
        raise UnsupportedError(f"DLPack data type code {dl.code} with {dl.lanes} lanes has no numpy equivalent")
    return np.dtype("?" if kind == "b" else f"{kind}{dl.bits // 8}")


# ------------------------------------------------------------------------------------------
# export
# ------------------------------------------------------------------------------------------

# What each live export keeps alive, by the address of its managed tensor; released by the
# consumer's deleter (or the capsule's destructor when nobody consumed it).  And the capsules that
# still exist, by address (each leaves through its destructor, consumed or not).
_exports: dict[int, tuple[Any, Callable[[], None]]] = {}
_capsules: set[int] = set()
_exports_lock = threading.RLock()  # re-entrant: a garbage collection under it may destroy a capsule
_detached = False  # past _detach_at_exit: new exports get no destructor and no deleter either


def _release_export(address: int) -> None:
    with _exports_lock:
        entry = _exports.pop(address, None)
    if entry is not None:
        entry[1]()


@_Deleter  # type: ignore[untyped-decorator]  # typeshed: a CFUNCTYPE takes Callable[..., Any]
def _deleter(managed: Any) -> None:
    _release_export(ctypes.cast(managed, ctypes.c_void_p).value or 0)


@_VersionedDeleter  # type: ignore[untyped-decorator]
def _versioned_deleter(managed: Any) -> None:
    _release_export(ctypes.cast(managed, ctypes.c_void_p).value or 0)


def _capsule_destructor(versioned: bool) -> Any:
    name = b"dltensor_versioned" if versioned else b"dltensor"

    @_CapsuleDestructor  # type: ignore[untyped-decorator]
    def destroy(capsule: int) -> None:
        with _exports_lock:
            _capsules.discard(capsule)
        # Only an unconsumed capsule still carries its name; a consumer renamed it and owns it.
        if _raw_is_valid(capsule, name):
            _release_export(_raw_get_pointer(capsule, name) or 0)

    return destroy


_DESTROY = {False: _capsule_destructor(False), True: _capsule_destructor(True)}


def make_capsule(
    data: int,
    device: tuple[int, int],
    dtype: np.dtype[Any],
    shape: tuple[int, ...],
    readonly: bool,
    versioned: bool,
    on_release: Callable[[], None],
) -> Any:
    """A DLPack capsule over compact, row-major memory; ``on_release()`` runs once the consumer
    is done with it."""
    ndim = len(shape)
    dims = (ctypes.c_int64 * max(ndim, 1))(*shape)
    managed: Any = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    tensor = managed.dl_tensor
    tensor.data = data
    tensor.device = DLDevice(*device)
    tensor.ndim = ndim
    tensor.dtype = _dl_dtype(dtype)
    tensor.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = None
    tensor.byte_offset = 0
    if versioned:
        managed.version = DLPackVersion(*VERSION)
        managed.flags = READ_ONLY if readonly else 0
    address = ctypes.addressof(managed)
    name = b"dltensor_versioned" if versioned else b"dltensor"
    with _exports_lock:
        _exports[address] = ((managed, dims), on_release)
        if _detached:
            return _api.PyCapsule_New(address, name, None)
        managed.deleter = _versioned_deleter if versioned else _deleter
        capsule = _api.PyCapsule_New(address, name, ctypes.cast(_DESTROY[versioned], ctypes.c_void_p))
        _capsules.add(id(capsule))
    return capsule


@atexit.register
def _detach_at_exit() -> None:
    """At interpreter exit, leave the exports that are still alive exported: their capsules lose
    their destructors and their tensors their deleters (DLPack allows a NULL deleter).

    Capsules and consumers' arrays that outlive the exit handlers die while the interpreter is
    being finalised, some only in its last garbage collection; a ctypes callback into Python
    code from there crashes.  The process's end reclaims the memory instead (the tensors stay in
    ``_exports``: consumers still read them)."""
    global _detached
    collecting = gc.isenabled()
    gc.disable()  # no capsule may die between the look at the set and its use
    try:
        with _exports_lock:
            _detached = True
            for capsule in _capsules:
                _api.PyCapsule_SetDestructor(capsule, None)
            _capsules.clear()
            for address, ((managed, _), _) in _exports.items():
                ctypes.memset(address + type(managed).deleter.offset, 0, ctypes.sizeof(ctypes.c_void_p))
    finally:
        if collecting:
            gc.enable()


class Imported:
    """The consumer's side of one producer's capsule: the tensor's description, and ``release()``
    to call the producer's deleter (once)."""

    __slots__ = ("producer", "managed", "released", "data", "dtype", "shape", "strides", "readonly", "device")

    def __init__(self, producer: Any, capsule: Any) -> None:
        versioned = bool(_api.PyCapsule_IsValid(capsule, b"dltensor_versioned"))
        name = b"dltensor_versioned" if versioned else b"dltensor"
        if not _api.PyCapsule_IsValid(capsule, name):
            raise InvalidArgumentError("the producer returned no unconsumed DLPack capsule")
        address = _api.PyCapsule_GetPointer(capsule, name)
        self.managed = ctypes.cast(address, ctypes.POINTER(DLManagedTensorVersioned if versioned else DLManagedTensor))
        _api.PyCapsule_SetName(capsule, b"used_dltensor_versioned" if versioned else b"used_dltensor")
        self.producer = producer
        self.released = False
        contents = self.managed.contents
        tensor = contents.dl_tensor
        self.readonly = versioned and bool(contents.flags & READ_ONLY)
        self.device = (int(tensor.device.device_type), int(tensor.device.device_id))
        self.shape = tuple(int(tensor.shape[i]) for i in range(tensor.ndim))
        self.strides = tuple(int(tensor.strides[i]) for i in range(tensor.ndim)) if tensor.strides else None
        self.data = (tensor.data or 0) + int(tensor.byte_offset)
        try:
            self.dtype = _np_dtype(tensor.dtype)
        except BaseException:
            self.release()
            raise

    @property
    def contiguous(self) -> bool:
        if self.strides is None:
            return True
        expected = 1
        for extent, stride in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if extent != 1 and stride != expected:
                return False
            expected *= extent
        return True

    def release(self) -> None:
        if not self.released:
            self.released = True
            if self.managed.contents.deleter:
                self.managed.contents.deleter(self.managed)

    def __del__(self) -> None:
        self.release()
