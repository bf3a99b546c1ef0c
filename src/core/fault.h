/* Allocation-failure injection for tests (docs/hardening.md "Out of memory").
 *
 * Compiled in always and inert unless the environment sets TTT_FAIL_ALLOC=N: then the Nth call
 * (counting from 1) of ttt_fault_alloc in the process answers 1, and the allocation that asked
 * fails as if memory had run out; every other call answers 0. TTT_FAIL_ALLOC=0 fails nothing and
 * prints the number of calls at exit ("ttt: N hooked allocations"), so a test knows how many
 * runs cover every N. The hooked sites are those that report out of memory as an error: the
 * configuration code, arena blocks, the text builder, parameters, AdamW, the trainer, records,
 * checkpoints, task data, safetensors, `ttt apply` and the recurrent kernels' rows beyond their
 * stack buffers (layers/forms/kernels.h); a test fails each of them in turn and
 * checks the error. The environment is read before main; the counter is atomic (hooked sites
 * also run on worker threads). */
#ifndef TTT_FAULT_H
#define TTT_FAULT_H

#include <stddef.h>

int ttt_fault_alloc(void);

/* malloc, calloc and realloc that fail when ttt_fault_alloc says so. */
void *ttt_fault_malloc(size_t n);
void *ttt_fault_calloc(size_t n, size_t size);
void *ttt_fault_realloc(void *p, size_t n);
char *ttt_fault_strdup(const char *s);

/* The default block size of a new arena: `bytes`, or at most TTT_FAULT_ARENA_BLOCK bytes when
 * the environment sets it (≥ 64). Arenas sized up front for a whole unit of work (the batch
 * runner's and the benchmark's per-thread arenas) then grow block by block, so that a test can
 * fail their growth, a hooked allocation like any other, where it happens: inside the OpenMP
 * regions (docs/hardening.md "Out of memory"). */
size_t ttt_fault_arena_block(size_t bytes);

#endif
