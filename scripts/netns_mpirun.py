"""Run an ``mpirun`` job with each rank on a network of its own, as on separate machines.

    python scripts/netns_mpirun.py [--ranks N] -- MPIRUN-ARGUMENTS... PROGRAM [ARGS...]

Makes N network namespaces (one per rank), each with its own loopback and one end of a veth pair
whose other end joins a bridge in this namespace, addresses 10.<a>.<b>.1..N/24; runs ``mpirun
--hostfile`` over them, Open MPI starting each rank's daemon inside its namespace (an "rsh agent"
that is ``ip netns exec`` plus a UTS namespace with a host name of its own, instead of ssh); and
removes everything again, whatever happens.  No rank shares a loopback, a host name or a
shared-memory transport with another: every byte between ranks crosses the veth pairs over TCP.
Processes still share the machine's memory, so ``PYOFFLOAD_MPI_CMA=0`` belongs in the caller's
environment to keep cross-memory attach out too.

Needs root (``CAP_NET_ADMIN``) and iproute2; ``--check`` prints why it cannot run here (exit
status 1) or nothing (0).  The names and the subnet derive from this process's id, so that
concurrent runs do not collide.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

AGENT = """#!/bin/sh
# Open MPI's launcher calls this as it would ssh: HOST COMMAND...
host=$1; shift
exec ip netns exec "{prefix}${{host##*.}}" unshare --uts /bin/sh -c "hostname {prefix}node${{host##*.}}; $*"
"""


def unavailable() -> str:
    """Why namespaces cannot be made here ("" if they can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux-only"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    for tool in ("ip", "unshare", "mpirun"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = f"pyoprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="say why namespaces cannot be made here")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- mpirun arguments and the program")
    cfg = ap.parse_args(argv)
    reason = unavailable()
    if cfg.check:
        if reason:
            print(reason)
        return 1 if reason else 0
    if reason:
        print(f"netns_mpirun: {reason}", file=sys.stderr)
        return 2
    command = cfg.command[1:] if cfg.command[:1] == ["--"] else cfg.command
    tag = os.getpid() % 60000
    prefix = f"pyo{tag}n"  # namespace names: pyo<tag>n<rank+1>; interfaces stay under 15 bytes
    subnet = f"10.{100 + tag // 250 % 150}.{tag % 250}"
    bridge = f"pyo{tag}br"
    made: list[tuple[str, ...]] = []
    with tempfile.TemporaryDirectory(prefix="pyoffload-netns-") as tmp:
        agent = Path(tmp) / "agent.sh"
        agent.write_text(AGENT.format(prefix=prefix))
        agent.chmod(0o755)
        hosts = Path(tmp) / "hosts"
        hosts.write_text("".join(f"{subnet}.{i} slots=1\n" for i in range(1, cfg.ranks + 1)))
        try:
            _ip("link", "add", bridge, "type", "bridge")
            made.append(("link", "del", bridge))
            _ip("addr", "add", f"{subnet}.254/24", "dev", bridge)
            _ip("link", "set", bridge, "up")
            for i in range(1, cfg.ranks + 1):
                ns, veth = f"{prefix}{i}", f"pyo{tag}v{i}"
                _ip("netns", "add", ns)
                made.append(("netns", "del", ns))
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                made.append(("link", "del", veth))
                _ip("link", "set", veth, "master", bridge, "up")
                _ip("-n", ns, "addr", "add", f"{subnet}.{i}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
            net = f"{subnet}.0/24"
            mpirun = [
                command[0],
                "--hostfile",
                str(hosts),
                "--mca",
                "plm_rsh_agent",
                str(agent),
                "--mca",
                "oob_tcp_if_include",
                net,
                "--mca",
                "btl_tcp_if_include",
                net,
            ]
            return subprocess.run([*mpirun, *command[1:]]).returncode
        finally:
            for undo in reversed(made):
                subprocess.run(["ip", *undo], capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
