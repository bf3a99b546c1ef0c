/* What the chunked log-linear forms share (docs/math.md §4.8 "Forms"): the Fenwick schedule's
 * merge target and level of a pair, and the chunked log-linear delta rule (chunkwise_delta.c),
 * which the loglinear chunkwise entry (chunkwise.c) runs for the delta-rule tuple. */
#ifndef TTT_LOGLINEAR_H
#define TTT_LOGLINEAR_H

#include "form.h"

/* The level that levels 0 … m − 1 merge into before token p, or 0 when nothing merges:
 * min(ctz(p) + 1, Λ − 1). */
static inline int ttt_ll_merge_target(long p, int nl) {
    if (p <= 0 || nl <= 1) return 0;
    int tz = 0;
    while (!((p >> tz) & 1)) tz++;
    return tz + 1 < nl - 1 ? tz + 1 : nl - 1;
}

/* The level of token j as read by token t ≥ j: min(bitlen(t xor j), Λ − 1). */
static inline int ttt_ll_level(long t, long j, int nl) {
    unsigned long x = (unsigned long)(t ^ j);
    int b = 0;
    while (x) b++, x >>= 1;
    return b < nl - 1 ? b : nl - 1;
}

/* The log-linear (gated) delta rule's forward in chunks of C = 2^c tokens aligned to absolute
 * positions (chunkwise_delta.c); the same contract as the entry's forward. */
ttt_status ttt_loglinear_delta_chunkwise(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                         ttt_layer_state *st, const ttt_form_args *a, int c);
/* Bytes of its scratch for T tokens in chunks of C. */
double ttt_loglinear_delta_chunkwise_scratch(const ttt_layer *L, long T, int C);

#endif
