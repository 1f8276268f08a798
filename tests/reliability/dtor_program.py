"""A host image whose ELF destructor appends ``dtor <tag>`` to the file named by its global
``log_path``: the interpreter-exit and teardown tests count destructor runs through that file."""

from __future__ import annotations

import functools

SOURCE = r"""
#include <stdio.h>
#include <stdint.h>
char log_path[512] = {0};
char tag[64] = {0};
__attribute__((destructor)) static void fini(void) {
    if (log_path[0]) {
        FILE *f = fopen(log_path, "a");
        if (f) { fprintf(f, "dtor %s\n", tag); fclose(f); }
    }
}
void spin(int64_t *out, int64_t n) {
    volatile int64_t s = 0;
    for (int64_t i = 0; i < n; i++) s += i;
    out[0] = n;
}
"""


@functools.cache
def image() -> bytes:
    from pyoffload.host import compile_c

    return compile_c(SOURCE)


def load(device, path: str, tag: str):
    prog = device.load_program(image())
    prog.global_variable("log_path").write(path.encode() + b"\0")
    prog.global_variable("tag").write(tag.encode() + b"\0")
    return prog
