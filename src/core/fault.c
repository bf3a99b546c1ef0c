#include "fault.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Atomic: hooked sites also run on worker threads (the trainer's shards, text built in
 * messages), and exactly one call must be the Nth. */
static _Atomic long calls;

static void print_count(void) {
    fprintf(stderr, "ttt: %ld hooked allocations\n", atomic_load(&calls));
}

/* -1: no injection; 0: count only; N: fail the Nth. Read before main (and so before threads),
 * so that a run that makes no hooked allocation still prints its count. */
static long target = -1;

/* TTT_FAULT_ARENA_BLOCK: the largest default arena block in bytes (0: no cap). */
static size_t block_cap;

__attribute__((constructor)) static void read_environment(void) {
    const char *s = getenv("TTT_FAIL_ALLOC");
    char *end = NULL;
    long n = s ? strtol(s, &end, 10) : -1;
    target = (s && end && *end == '\0' && n >= 0) ? n : -1;
    if (target == 0) atexit(print_count);
    s = getenv("TTT_FAULT_ARENA_BLOCK");
    end = NULL;
    n = s ? strtol(s, &end, 10) : 0;
    block_cap = (s && end && *end == '\0' && n >= 64) ? (size_t)n : 0;
}

size_t ttt_fault_arena_block(size_t bytes) {
    return block_cap && bytes > block_cap ? block_cap : bytes;
}

int ttt_fault_alloc(void) {
    if (target < 0) return 0;
    return atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed) + 1 == target;
}

void *ttt_fault_malloc(size_t n) { return ttt_fault_alloc() ? NULL : malloc(n); }
void *ttt_fault_calloc(size_t n, size_t size) { return ttt_fault_alloc() ? NULL : calloc(n, size); }
void *ttt_fault_realloc(void *p, size_t n) { return ttt_fault_alloc() ? NULL : realloc(p, n); }

char *ttt_fault_strdup(const char *s) {
    if (ttt_fault_alloc()) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}
