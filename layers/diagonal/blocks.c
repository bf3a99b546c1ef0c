/* The LRU layer and Mamba's block around the selective scan, from recorded ops (diagonal.h,
 * docs/math.md §8.1, §8.2): the projections and activations are ops of src/core/ops.h, the
 * recurrences the ops of diagonal.c, so everything here trains. Sequences of a batch are scanned
 * one at a time (the scans' state restarts at each sequence). */
#include <math.h>

#include "diagonal.h"
#include "ops.h"

/* Rows [b·T, (b+1)·T) of x. */
static ttt_tensor *seq_rows(ttt_ctx *ctx, const ttt_tensor *x, int b, int T) {
    return ttt_slice_rows(ctx, x, b * T, (b + 1) * T);
}

ttt_tensor *ttt_lru_block(ttt_ctx *ctx, const ttt_lru_weights *w, const ttt_tensor *x, int B,
                          int T, int blocks) {
    ttt_tensor *U = ttt_matmul(ctx, x, 0, w->w_b, 0); /* (B·T, 2n) */
    /* a host array of headers, also when the tensors are on a device */
    ttt_tensor **H = ttt_arena_alloc(ttt_arena_host(ctx->arena), sizeof *H * (size_t)B);
    TTT_ASSERT(H);
    for (int b = 0; b < B; b++)
        H[b] = ttt_lru_op(ctx, w->nu, w->theta, B == 1 ? U : seq_rows(ctx, U, b, T), NULL,
                          blocks);
    ttt_tensor *Hs = B == 1 ? H[0] : ttt_concat_rows_n(ctx, (const ttt_tensor *const *)H, B);
    ttt_tensor *y = ttt_matmul(ctx, Hs, 0, w->w_c, 0);
    return w->d ? ttt_add(ctx, y, ttt_scale_cols(ctx, x, w->d)) : y;
}

ttt_tensor *ttt_mamba_block(ttt_ctx *ctx, const ttt_mamba_weights *w, const ttt_tensor *x, int B,
                            int T, int blocks) {
    const int di = TTT_COLS(w->w_in) / 2, N = TTT_COLS(w->a_log), r = TTT_ROWS(w->w_dt);
    ttt_tensor *xz = ttt_matmul(ctx, x, 0, w->w_in, 0); /* (B·T, 2·d_inner) */
    ttt_tensor *xb = ttt_slice_cols(ctx, xz, 0, di), *z = ttt_slice_cols(ctx, xz, di, 2 * di);
    /* the causal convolution restarts at each sequence: (B, T, d_inner) */
    xb = ttt_reshape(ctx, xb, 3, (int[]){B, T, di});
    xb = ttt_silu(ctx, ttt_conv1d_causal(ctx, xb, w->conv_w, w->conv_b));
    xb = ttt_reshape(ctx, xb, 2, (int[]){B * T, di});
    ttt_tensor *xd = ttt_matmul(ctx, xb, 0, w->w_x, 0); /* (B·T, r + 2N) */
    ttt_tensor *dt = ttt_matmul(ctx, ttt_slice_cols(ctx, xd, 0, r), 0, w->w_dt, 0);
    dt = ttt_softplus(ctx, ttt_add(ctx, dt, w->b_dt)); /* Δ > 0, (B·T, d_inner) */
    ttt_tensor *Bm = ttt_slice_cols(ctx, xd, r, r + N), *Cm = ttt_slice_cols(ctx, xd, r + N,
                                                                              r + 2 * N);
    ttt_tensor **Y = ttt_arena_alloc(ttt_arena_host(ctx->arena), sizeof *Y * (size_t)B);
    TTT_ASSERT(Y);
    for (int b = 0; b < B; b++) {
        if (B == 1) {
            Y[b] = ttt_selective_scan_op(ctx, xb, dt, w->a_log, Bm, Cm, w->d, NULL, blocks);
            continue;
        }
        Y[b] = ttt_selective_scan_op(ctx, seq_rows(ctx, xb, b, T), seq_rows(ctx, dt, b, T),
                                     w->a_log, seq_rows(ctx, Bm, b, T), seq_rows(ctx, Cm, b, T),
                                     w->d, NULL, blocks);
    }
    ttt_tensor *y = B == 1 ? Y[0] : ttt_concat_rows_n(ctx, (const ttt_tensor *const *)Y, B);
    return ttt_mul(ctx, y, ttt_silu(ctx, z));
}

void ttt_mamba_init_a_log(float *a_log, int d_inner, int N) {
    for (int i = 0; i < d_inner; i++)
        for (int n = 0; n < N; n++) a_log[(size_t)i * N + n] = logf((float)(n + 1));
}

void ttt_mamba_init_dt_bias(float *b_dt, int d_inner, double dt_min, double dt_max,
                            ttt_rng *rng) {
    for (int i = 0; i < d_inner; i++) {
        const double u = ttt_rng_uniform(rng);
        const double dt = exp(log(dt_min) + u * (log(dt_max) - log(dt_min)));
        b_dt[i] = (float)(dt + log(-expm1(-dt))); /* softplus⁻¹(dt) = log(e^dt − 1) */
    }
}
