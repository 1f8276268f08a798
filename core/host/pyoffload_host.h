/* pyoffload_host.h: data-parallel kernels for pyoffload's host (CPU) backend.
 *
 * build_program() on the host device puts this header on the include path.  A kernel declared
 * with PYOFFLOAD_KERNEL is data-parallel: the backend's runtime splits a launch's work-groups
 * into ranges and calls the function once per range, from several threads at once.  Its
 * first parameter is PYOFFLOAD_GROUPS (hidden: the launch arguments are the parameters after it):
 *
 *     #include <pyoffload_host.h>
 *
 *     PYOFFLOAD_KERNEL(axpy)(PYOFFLOAD_GROUPS, float *y, const float *x, float a, int n) {
 *         PYOFFLOAD_FOR_EACH_GROUP {
 *             PYOFFLOAD_FOR_EACH_ITEM {
 *                 uint64_t i = pyoffload_global_id(0);
 *                 if (i < (uint64_t)n) y[i] += a * x[i];
 *             }
 *         }
 *     }
 *
 * PYOFFLOAD_FOR_EACH_GROUP loops over the work-groups of this call, PYOFFLOAD_FOR_EACH_ITEM over
 * the work-items of the current group; the id helpers below are valid inside them.
 *
 * Barriers: a work-group barrier is the end of one PYOFFLOAD_FOR_EACH_ITEM loop and the start of
 * the next inside the same group (the way OpenMP and SYCL CPU back ends lower barriers): every
 * item finishes the first loop before any item starts the second.  Values an item carries across
 * a barrier go to local memory, indexed by pyoffload_local_linear_id().
 *
 * Local memory: a LocalMemory(n) argument arrives as a pointer to n bytes, one buffer per calling
 * thread, reused by the work-groups that thread runs (it is not cleared between groups).
 *
 * Traps: pyoffload_trap() (inside PYOFFLOAD_FOR_EACH_GROUP) abandons the rest of this call and
 * makes the launch fail; its error is reported at the next wait.  Other ranges of the launch may
 * have run; none starts after the trap.
 *
 * Inside the loops, `continue` skips to the next item (or group); `break` and `return` leave more
 * than one item and are not data-parallel.
 *
 * Plain C kernels can be data-parallel without these macros: see pyoffload_launch below.
 *
 * An exported function of neither kind is called once per launch with the arguments alone and
 * loops over its work itself.
 */
#ifndef PYOFFLOAD_HOST_H
#define PYOFFLOAD_HOST_H

#include <setjmp.h>
#include <stdint.h>

#define PYOFFLOAD_HOST_ABI 1

/* What the backend passes to one call of a data-parallel kernel.  The layout is part of the
 * backend's calling convention (pyoffload/host/plugin.py mirrors it): append only. */
typedef struct pyoffload_groups {
    uint64_t num_groups[3]; /* the launch's grid */
    uint64_t local_size[3]; /* the launch's block */
    uint64_t first;         /* linear work-group ids [first, last) are this call's */
    uint64_t last;
    void *trap_env;         /* set by PYOFFLOAD_FOR_EACH_GROUP */
    uint64_t trapped;       /* 1 + the linear id of the group that trapped; 0: none */
} pyoffload_groups;

typedef struct pyoffload_frame_ {
    jmp_buf env;
    int entered;
} pyoffload_frame_;

#define PYOFFLOAD_KERNEL(name) \
    __attribute__((visibility("default"))) const char pyoffload_parallel_##name = PYOFFLOAD_HOST_ABI; \
    void name

#define PYOFFLOAD_GROUPS pyoffload_groups *pyoffload_g

/* setjmp once per call, in the kernel's own frame (longjmp needs it live); a trap returns. */
#define PYOFFLOAD_FOR_EACH_GROUP                                                                      \
    for (pyoffload_frame_ pyoffload_frame = {.entered = 0}; !pyoffload_frame.entered;                \
         pyoffload_frame.entered = 1)                                                                 \
        if (pyoffload_g->trap_env = &pyoffload_frame.env, 0) {                                       \
        } else if (setjmp(pyoffload_frame.env) != 0) {                                               \
            return;                                                                                   \
        } else                                                                                        \
            for (uint64_t pyoffload_group_ = pyoffload_g->first; pyoffload_group_ < pyoffload_g->last; \
                 pyoffload_group_++)                                                                  \
                for (uint64_t pyoffload_g0_ = pyoffload_group_ % pyoffload_g->num_groups[0],          \
                              pyoffload_g1_ = pyoffload_group_ / pyoffload_g->num_groups[0] %         \
                                              pyoffload_g->num_groups[1],                             \
                              pyoffload_g2_ = pyoffload_group_ / pyoffload_g->num_groups[0] /         \
                                              pyoffload_g->num_groups[1],                             \
                              pyoffload_once_ = 1;                                                    \
                     pyoffload_once_; pyoffload_once_ = 0)

#define PYOFFLOAD_FOR_EACH_ITEM                                                                       \
    for (uint64_t pyoffload_l2_ = 0; pyoffload_l2_ < pyoffload_g->local_size[2]; pyoffload_l2_++)    \
        for (uint64_t pyoffload_l1_ = 0; pyoffload_l1_ < pyoffload_g->local_size[1]; pyoffload_l1_++) \
            for (uint64_t pyoffload_l0_ = 0; pyoffload_l0_ < pyoffload_g->local_size[0]; pyoffload_l0_++)

/* Ids, per dimension d in 0..2 (a constant d costs nothing).  Group ids are valid inside
 * PYOFFLOAD_FOR_EACH_GROUP, local and global ids inside PYOFFLOAD_FOR_EACH_ITEM. */
#define pyoffload_num_groups(d) (pyoffload_g->num_groups[d])
#define pyoffload_local_size(d) (pyoffload_g->local_size[d])
#define pyoffload_global_size(d) (pyoffload_g->num_groups[d] * pyoffload_g->local_size[d])
#define pyoffload_group_id(d) ((d) == 0 ? pyoffload_g0_ : (d) == 1 ? pyoffload_g1_ : pyoffload_g2_)
#define pyoffload_local_id(d) ((d) == 0 ? pyoffload_l0_ : (d) == 1 ? pyoffload_l1_ : pyoffload_l2_)
#define pyoffload_global_id(d) (pyoffload_group_id(d) * pyoffload_local_size(d) + pyoffload_local_id(d))
#define pyoffload_local_linear_id() \
    ((pyoffload_l2_ * pyoffload_g->local_size[1] + pyoffload_l1_) * pyoffload_g->local_size[0] + pyoffload_l0_)

static inline __attribute__((noreturn)) void pyoffload_trap_(pyoffload_groups *g, uint64_t group) {
    g->trapped = group + 1;
    longjmp(*(jmp_buf *)g->trap_env, 1);
}

#define pyoffload_trap() pyoffload_trap_(pyoffload_g, pyoffload_group_)

/* The launch-context ABI: plain C, no macros.  An exported function whose last parameter is a
 * pointer to pyoffload_launch is data-parallel: the backend calls it once per work-group, from
 * several threads at once, with the launch arguments in the parameters before it (the backend
 * recognises the parameter from the image's DWARF, so build with -g, as build_program does):
 *
 *     #include <pyoffload_host.h>
 *
 *     void scale(float *x, float a, int n, const pyoffload_launch *ctx) {
 *         uint64_t base = ctx->group_id[0] * ctx->local_size[0];
 *         for (uint64_t l = 0; l < ctx->local_size[0]; l++)
 *             if (base + l < (uint64_t)n) x[base + l] *= a;
 *     }
 *
 * The work-items of the group are the function's own loop; a barrier is the end of one item
 * loop and the start of the next, as with PYOFFLOAD_FOR_EACH_ITEM.  LocalMemory arguments arrive
 * as pointers, one buffer per thread reused by the groups it runs (not cleared);
 * `local_memory` is the first of them.  The layout is part of the backend's calling convention:
 * append only. */
typedef struct pyoffload_launch {
    uint64_t group_id[3];       /* this work-group */
    uint64_t num_groups[3];     /* the launch's grid */
    uint64_t local_size[3];     /* the launch's block */
    uint64_t global_size[3];    /* num_groups * local_size */
    uint64_t group_linear_id;   /* group_id[0] + num_groups[0] * (group_id[1] + num_groups[1] * group_id[2]) */
    uint64_t group_count;       /* num_groups[0] * num_groups[1] * num_groups[2] */
    void *local_memory;         /* this thread's local memory (the LocalMemory arguments, in order) */
    uint64_t local_memory_bytes;
    uint32_t thread;            /* which of the launch's threads runs this group (0 .. threads-1) */
    uint32_t threads;
    void *trap_env_;            /* the runtime's */
    uint64_t trapped_;
} pyoffload_launch;

/* Abandon this work-group and fail the launch (reported at the next wait), as pyoffload_trap(). */
static inline __attribute__((noreturn)) void pyoffload_launch_trap(const pyoffload_launch *ctx) {
    ((pyoffload_launch *)ctx)->trapped_ = 1;
    longjmp(*(jmp_buf *)ctx->trap_env_, 1);
}

#endif /* PYOFFLOAD_HOST_H */
