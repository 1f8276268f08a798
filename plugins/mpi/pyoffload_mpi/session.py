"""This process's role in an MPI job started with ``python -m pyoffload_mpi``.

The role is decided by the launcher, never at import or by the plugin's ``init_impl``: a plugin
cannot tell from inside whether its process should serve or be served.  Without the launcher
there is no session, and the plugin reports "no devices".
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class Session:
    comm: Any
    rank: int
    size: int
    link: Any = None  # rank 0's client.Link while ranks serve


CURRENT: Session | None = None
