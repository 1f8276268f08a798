"""Address bookkeeping: ranges of device and host memory the runtime knows about (the allocation
registry, the pinned-host-memory maps).  Pure data structures: no hooks are called from here."""
