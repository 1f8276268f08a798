"""A second, in-process backend for the reliability tests: the host backend's own hook
implementations behind two CPU platforms ("twin-a" with two devices, "twin-b" with one).

It gives every machine a second backend, a second device of one platform and a second platform,
so cross-device, cross-backend and cross-platform misuse can be tested without a GPU.  Its
DEVICE memory is not host-accessible as far as the generic layer knows (the device type is CPU,
not HOST), so copies go through data_submit/retrieve like on a real accelerator.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyoffload.backend import HOOK_API, DeviceDesc, DeviceType, PlatformDesc, hookimpl  # noqa: F401
from pyoffload.host.plugin import (  # noqa: F401  (re-exported: pluggy registers them)
    conformance_images_impl,
    data_alloc_impl,
    data_exchange_impl,
    data_fill_impl,
    data_free_impl,
    data_lock_impl,
    data_retrieve_impl,
    data_submit_impl,
    deinit_impl,
    device_info_impl,
    enqueue_host_function_impl,
    event_elapsed_impl,
    event_query_impl,
    event_record_impl,
    event_wait_impl,
    get_global_impl,
    get_kernel_impl,
    get_symbols_impl,
    kernel_packer_impl,
    kernel_signature_impl,
    launch_impl,
    launch_prepare_impl,
    load_binary_impl,
    queue_create_impl,
    queue_destroy_impl,
    queue_query_impl,
    queue_synchronize_impl,
    unload_binary_impl,
)

NAME = "twin"


class TwinDevice:
    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return f"<TwinDevice {self.label}>"


_A = (TwinDevice("a0"), TwinDevice("a1"))
_B = (TwinDevice("b0"),)


@hookimpl
def init_impl() -> Sequence[PlatformDesc]:
    def descs(devs: tuple[TwinDevice, ...]) -> tuple[DeviceDesc, ...]:
        return tuple(DeviceDesc(f"twin cpu {d.label}", "pyoffload-tests", DeviceType.CPU, d) for d in devs)

    return [
        PlatformDesc("twin-a", "pyoffload-tests", "1", descs(_A), "A"),
        PlatformDesc("twin-b", "pyoffload-tests", "1", descs(_B), "B"),
    ]
