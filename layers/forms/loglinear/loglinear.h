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
/* Whether the chunked op below computes a call (else the recurrent form's op runs): chunks of
 * 2^c ≤ 256 tokens from an aligned position p0, Λ ≥ c + 2 levels (every merge at a chunk start then
 * empties levels 0 … c), and at p0 = 0 an initial state whose levels 0 … c are empty and want no
 * gradient. */
int ttt_loglinear_delta_chunk_op_fits(const ttt_layer *L, const ttt_tensor *S0, long p0, int T,
                                      int c);
/* Under a tape: the chunked forward as one custom op whose backward is written by hand
 * (chunkwise_delta.c); the recurrent op's inputs and outputs (q (T, Λ·d_k), k, v, beta (T) or
 * NULL, log_alpha (T) or NULL, S0 (Λ·d_k·d_v); O (T, d_v), *S_out (Λ·d_k, d_v)). */
ttt_tensor *ttt_loglinear_delta_chunk_op(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_layer *L,
                                         const ttt_tensor *q, const ttt_tensor *k,
                                         const ttt_tensor *v, const ttt_tensor *beta,
                                         const ttt_tensor *log_alpha, const ttt_tensor *S0,
                                         long p0, int c);
/* Bytes of its scratch for T tokens in chunks of C. */
double ttt_loglinear_delta_chunkwise_scratch(const ttt_layer *L, long T, int C);

#endif
