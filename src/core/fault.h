/* Allocation-failure injection for tests (docs/hardening.md "Out of memory").
 *
 * Compiled in always and inert unless the environment sets TTT_FAIL_ALLOC=N: then the Nth call
 * (counting from 1) of ttt_fault_alloc in the process answers 1, and the allocation that asked
 * fails as if memory had run out; every other call answers 0. Allocation sites that can report
 * out of memory as an error ask it first (the safetensors reader and writer, `ttt apply`'s
 * outputs), so a test can fail each of them in turn and check the error. The first call reads the
 * environment; it is made before threads start (the hooked sites run on the main thread). */
#ifndef TTT_FAULT_H
#define TTT_FAULT_H

#include <stddef.h>

int ttt_fault_alloc(void);

/* malloc, calloc and realloc that fail when ttt_fault_alloc says so. */
void *ttt_fault_malloc(size_t n);
void *ttt_fault_calloc(size_t n, size_t size);
void *ttt_fault_realloc(void *p, size_t n);

#endif
