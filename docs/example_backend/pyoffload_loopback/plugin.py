"""The loopback backend: the plugin guide's example.

It reports one CPU device of its own and serves it with host memory and the host backend's ELF
images.  Unlike the built-in host device, its type is CPU rather than HOST, so pyoffload treats its
memory as device memory: every copy goes through ``data_submit_impl`` / ``data_retrieve_impl``,
exactly as for a GPU.  The vendor calls themselves are borrowed from the host backend's module,
which is the shortest honest way to show the whole hook surface working end to end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyoffload.backend import DeviceDesc, DeviceType, PlatformDesc, hookimpl
from pyoffload.host import plugin as _vendor


class LoopbackDevice:
    """The backend's device handle: whatever the backend likes."""


_DEVICE = LoopbackDevice()


@hookimpl
def init_impl() -> Sequence[PlatformDesc]:
    device = DeviceDesc("loopback cpu", "pyoffload example", DeviceType.CPU, _DEVICE)
    return [PlatformDesc("loopback", "pyoffload example", "1.0", (device,))]


@hookimpl
def device_info_impl(device: LoopbackDevice) -> dict[str, Any]:
    return {**_vendor.device_info_impl(device), "example": True}


# Every other vendor call is the host backend's own implementation, already marked @hookimpl.
# (A real backend writes these against its driver; see pyoffload/hookspecs.py for each one.)
deinit_impl = _vendor.deinit_impl
data_alloc_impl = _vendor.data_alloc_impl
data_free_impl = _vendor.data_free_impl
data_submit_impl = _vendor.data_submit_impl
data_retrieve_impl = _vendor.data_retrieve_impl
data_exchange_impl = _vendor.data_exchange_impl
data_fill_impl = _vendor.data_fill_impl
data_lock_impl = _vendor.data_lock_impl
data_unlock_impl = _vendor.data_unlock_impl
load_binary_impl = _vendor.load_binary_impl
unload_binary_impl = _vendor.unload_binary_impl
get_symbols_impl = _vendor.get_symbols_impl
get_kernel_impl = _vendor.get_kernel_impl
kernel_signature_impl = _vendor.kernel_signature_impl
get_global_impl = _vendor.get_global_impl
launch_impl = _vendor.launch_impl
launch_prepare_impl = _vendor.launch_prepare_impl
queue_create_impl = _vendor.queue_create_impl
queue_destroy_impl = _vendor.queue_destroy_impl
queue_synchronize_impl = _vendor.queue_synchronize_impl
queue_query_impl = _vendor.queue_query_impl
enqueue_host_function_impl = _vendor.enqueue_host_function_impl
event_wait_impl = _vendor.event_wait_impl
event_query_impl = _vendor.event_query_impl
event_elapsed_impl = _vendor.event_elapsed_impl
conformance_images_impl = _vendor.conformance_images_impl
