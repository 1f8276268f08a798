"""The ``pyoffload`` command: ``info`` (devices), ``plugins`` (what loaded and why not), ``demo``."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _info(args: argparse.Namespace) -> int:
    import pyoffload

    for platform in pyoffload.platforms():
        print(f"platform {platform.backend}:{platform.name} ({platform.vendor}, {platform.version})")
        for dev in platform.devices:
            print(f"  {dev.id}: {dev.name} [{dev.type.value}]")
            if args.verbose:
                for key, value in sorted(dev.info.items()):
                    print(f"      {key} = {value}")
            else:
                info = dev.info
                keys = ("global_memory_bytes", "compute_units", "max_work_group_size", "driver_version")
                print("      " + ", ".join(f"{k}={info[k]}" for k in keys if info.get(k) is not None))
    return 0


def _plugins(args: argparse.Namespace) -> int:
    import pyoffload

    for report in pyoffload.plugins():
        line = report.line()
        if report.hook_api is not None and args.verbose:
            line += f" [hook API {report.hook_api[0]}.{report.hook_api[1]}]"
        print(line)
    return 0


def demo_on(device: Any) -> None:
    """Load the backend's demo programs, launch, read a global, unload, show the destructor ran."""
    import numpy as np

    import pyoffload

    images = device.disp.conformance_images_impl(device.handle)
    if not images:
        print(f"{device.id}: the backend ships no demo programs")
        return
    n = 8
    with device.create_queue() as queue, device.load_program(images["kernels"]) as prog:
        x = device.alloc(4 * n)
        y = device.alloc(4 * n)
        pyoffload.memcpy(x, np.arange(n, dtype=np.float32))
        pyoffload.memcpy(y, np.ones(n, dtype=np.float32))
        queue.launch(prog.kernel("axpy_f32"), 1, n, [y, x, np.float32(2.0), np.int32(n)]).wait()
        out = np.zeros(n, dtype=np.float32)
        pyoffload.memcpy(out, y)
        print(f"{device.id}: axpy_f32 y = 1 + 2*x  -> {out.tolist()}")
        try:
            print(f"{device.id}: global 'table' = {prog.global_variable('table').read(np.int32).tolist()}")
        except pyoffload.UnsupportedError as exc:
            print(f"{device.id}: globals unsupported here: {exc}")
        x.free()
        y.free()
    with device.create_queue() as queue:
        prog = device.load_program(images["ctor_dtor"])
        state = device.alloc(8)
        queue.launch(prog.kernel("get_state"), 1, 1, [state]).wait()
        got = np.zeros(2, dtype=np.int32)
        pyoffload.memcpy(got, state)
        print(f"{device.id}: constructor ran at load: ctor_value={got[0]} runs={got[1]}")
        pyoffload.memfill(state, np.int32(0))
        queue.launch(prog.kernel("set_dtor_out"), 1, 1, [state]).wait()
        prog.unload()
        pyoffload.memcpy(got, state)
        print(f"{device.id}: after unload the destructor wrote {got[0]} (runs={got[1]})")
        state.free()


def _demo(args: argparse.Namespace) -> int:
    import pyoffload

    for dev in pyoffload.devices():
        demo_on(dev)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pyoffload", description="pyoffload: devices, plugins and a demo")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="list platforms and devices")
    info.add_argument("-v", "--verbose", action="store_true", help="every info key")
    info.set_defaults(func=_info)
    plugins = sub.add_parser("plugins", help="each installed backend: ok, no devices, failed, incompatible (why)")
    plugins.add_argument("-v", "--verbose", action="store_true", help="the hook API version each plugin declares")
    plugins.set_defaults(func=_plugins)
    sub.add_parser("demo", help="load a program on every device, launch, read a global, unload").set_defaults(
        func=_demo
    )
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
