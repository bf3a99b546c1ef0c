#include "fault.h"

#include <stdlib.h>

int ttt_fault_alloc(void) {
    static long target = -2; /* -2: environment not read yet; -1: no injection */
    static long calls;
    if (target == -2) {
        const char *s = getenv("TTT_FAIL_ALLOC");
        char *end = NULL;
        long n = s ? strtol(s, &end, 10) : -1;
        target = (s && end && *end == '\0' && n >= 1) ? n : -1;
    }
    if (target < 0) return 0;
    return ++calls == target;
}

void *ttt_fault_malloc(size_t n) { return ttt_fault_alloc() ? NULL : malloc(n); }
void *ttt_fault_calloc(size_t n, size_t size) { return ttt_fault_alloc() ? NULL : calloc(n, size); }
void *ttt_fault_realloc(void *p, size_t n) { return ttt_fault_alloc() ? NULL : realloc(p, n); }
