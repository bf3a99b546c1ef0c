/* The public calls of the generalized delta rule (include/ttt/ttt.h "ttt_dplr_forward",
 * docs/math.md "RWKV-7"): each (batch, head) sequence of the (B, T, H, D) buffers through the
 * recurrent kernel of layers/forms/delta_rule/dplr.c or the chunkwise form of dplr_chunk.c, in
 * place with row strides (forward), or gathered into contiguous rows for the backward (the
 * recurrence's backward, or with io->chunk > 0 the chunkwise backward of dplr_chunk.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dplr.h"
#include "status.h"

#include <ttt/ttt.h>

/* Tokens between the states the backward keeps (it recomputes one such chunk at a time). */
#define DPLR_API_CHUNK 64

static ttt_status check(const ttt_dplr_io *io, const char *fn, ttt_error *err) {
    if (!io) return ttt_error_set(err, TTT_ERR_ARG, "%s: io is NULL", fn);
    if (io->B < 1 || io->H < 1 || io->T < 0 || io->d_k < 1 || io->d_v < 1)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "%s: expected B, H, d_k, d_v >= 1 and T >= 0, got B = %d, T = %d, "
                             "H = %d, d_k = %d, d_v = %d",
                             fn, io->B, io->T, io->H, io->d_k, io->d_v);
    const double rows = (double)io->B * io->T * io->H;
    const double big = rows * (io->d_k > io->d_v ? io->d_k : io->d_v) * sizeof(float);
    if (big > (double)PTRDIFF_MAX / 4)
        return ttt_error_set(err, TTT_ERR_SHAPE, "%s: (B, T, H, D) = (%d, %d, %d, %d) is too large",
                             fn, io->B, io->T, io->H, io->d_k > io->d_v ? io->d_k : io->d_v);
    const char *missing = !io->o ? "o" : !io->q ? "q" : !io->k ? "k" : !io->a ? "a"
                          : !io->b ? "b" : !io->v ? "v" : NULL;
    if (missing) return ttt_error_set(err, TTT_ERR_ARG, "%s: io->%s is NULL", fn, missing);
    if (io->chunk < 0)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "%s: io->chunk = %d; expected 0 (the recurrence) or a chunk size >= 1",
                             fn, io->chunk);
    return TTT_OK;
}

ttt_status ttt_dplr_forward(const ttt_dplr_io *io, ttt_error *err) {
    TTT_TRY(check(io, "ttt_dplr_forward", err));
    const int B = io->B, T = io->T, H = io->H, dk = io->d_k, dv = io->d_v;
    const size_t dkv = (size_t)dk * dv;
    float *S = malloc(dkv * sizeof(float));
    if (!S) return ttt_error_set(err, TTT_ERR_NOMEM, "ttt_dplr_forward: no memory for a state");
    const ttt_form_ld ld = {.o = H * dv, .q = H * dk, .k = H * dk, .v = H * dv, .beta = 1,
                            .la = H * dk};
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const size_t seq = (size_t)b * H + h;
            const size_t rk = ((size_t)b * T * H + h) * dk, rv = ((size_t)b * T * H + h) * dv;
            if (io->state_in) memcpy(S, io->state_in + seq * dkv, dkv * sizeof(float));
            else memset(S, 0, dkv * sizeof(float));
            if (io->chunk > 0) {
                const ttt_status s = ttt_dplr_chunkwise_ld(
                    io->o + rv, S, io->q + rk, io->k + rk, io->v + rv, io->a + rk, io->b + rk,
                    io->log_w ? io->log_w + rk : NULL, T, dk, dv, io->chunk, &ld, err);
                if (s != TTT_OK) {
                    free(S);
                    ttt_error_prefix(err, "ttt_dplr_forward");
                    return s;
                }
            } else if (ttt_dplr_recurrent_ld(io->o + rv, S, io->q + rk, io->k + rk, io->v + rv,
                                             io->a + rk, io->b + rk,
                                             io->log_w ? io->log_w + rk : NULL, T, dk, dv,
                                             &ld) != TTT_OK) {
                free(S);
                return ttt_error_set(err, TTT_ERR_NOMEM,
                                     "ttt_dplr_forward: out of memory for the recurrent kernel's "
                                     "rows (d_k = %d, d_v = %d)", dk, dv);
            }
            if (io->state_out) memcpy(io->state_out + seq * dkv, S, dkv * sizeof(float));
        }
    free(S);
    return TTT_OK;
}

/* Rows of one sequence: (T, w) contiguous from (B, T, H, w) at batch b, head h, or back. */
static void gather(float *dst, const float *src, int b, int h, int T, int H, int w) {
    for (int t = 0; t < T; t++)
        memcpy(dst + (size_t)t * w, src + (((size_t)b * T + t) * H + h) * w, w * sizeof(float));
}
static void scatter(float *dst, const float *src, int b, int h, int T, int H, int w) {
    for (int t = 0; t < T; t++)
        memcpy(dst + (((size_t)b * T + t) * H + h) * w, src + (size_t)t * w, w * sizeof(float));
}

ttt_status ttt_dplr_backward(const ttt_dplr_io *io, const ttt_dplr_grad *g, ttt_error *err) {
    TTT_TRY(check(io, "ttt_dplr_backward", err));
    if (!g || !g->d_o)
        return ttt_error_set(err, TTT_ERR_ARG, "ttt_dplr_backward: %s is NULL",
                             !g ? "g" : "g->d_o");
    if (g->d_log_w && !io->log_w)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "ttt_dplr_backward: g->d_log_w needs io->log_w (w = 1 has no gate)");
    const int B = io->B, T = io->T, H = io->H, dk = io->d_k, dv = io->d_v;
    const size_t dkv = (size_t)dk * dv, Tk = (size_t)T * dk, Tv = (size_t)T * dv;
    /* the recurrence keeps a state every DPLR_API_CHUNK tokens; the chunkwise form one per chunk */
    const int chunkwise = io->chunk > 0, step = chunkwise ? io->chunk : DPLR_API_CHUNK;
    const int C = T < step ? (T > 0 ? T : 1) : step, nch = (T + C - 1) / C;
    /* the backward's workspace (doubles for the chunkwise form, placed first so that they stay
     * 8-byte aligned, as the recurrence's); q, k, a, b, log w, their 5 gradients (T d_k each);
     * v, o, dO, dv (T d_v each); the chunk states, dS */
    const size_t nws = chunkwise ? 2 * ttt_dplr_chunkwise_backward_ws(C, dk, dv)
                                 : ttt_dplr_recurrent_backward_ws(C, dk, dv);
    const double total = (double)nws + 10.0 * Tk + 4.0 * Tv + ((double)nch + 1) * dkv;
    float *buf = total * sizeof(float) < (double)PTRDIFF_MAX ? malloc((size_t)total * sizeof(float))
                                                               : NULL;
    if (!buf)
        return ttt_error_set(err, TTT_ERR_NOMEM, "ttt_dplr_backward: no memory for %.3g floats",
                             total);
    float *ws = buf;
    float *q = ws + nws, *k = q + Tk, *a = k + Tk,
          *bb = a + Tk, *lw = bb + Tk, *gq = lw + Tk, *gk = gq + Tk, *ga = gk + Tk,
          *gb = ga + Tk, *glw = gb + Tk, *v = glw + Tk, *o = v + Tv, *dO = o + Tv, *gv = dO + Tv,
          *S0s = gv + Tv, *dS = S0s + (size_t)nch * dkv;
    const ttt_form_ld ld = {.o = dv, .q = dk, .k = dk, .v = dv, .beta = 1, .la = dk};
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const size_t seq = (size_t)b * H + h;
            gather(q, io->q, b, h, T, H, dk);
            gather(k, io->k, b, h, T, H, dk);
            gather(a, io->a, b, h, T, H, dk);
            gather(bb, io->b, b, h, T, H, dk);
            if (io->log_w) gather(lw, io->log_w, b, h, T, H, dk);
            gather(v, io->v, b, h, T, H, dv);
            gather(dO, g->d_o, b, h, T, H, dv);
            /* the forward, chunk by chunk, keeping each chunk's start state */
            if (io->state_in) memcpy(dS, io->state_in + seq * dkv, dkv * sizeof(float));
            else memset(dS, 0, dkv * sizeof(float));
            for (int c = 0; c < nch; c++) {
                const int t0 = c * C, m = t0 + C <= T ? C : T - t0;
                const size_t r = (size_t)t0 * dk;
                memcpy(S0s + (size_t)c * dkv, dS, dkv * sizeof(float));
                if (chunkwise) {
                    const ttt_status s = ttt_dplr_chunkwise_ld(
                        o + (size_t)t0 * dv, dS, q + r, k + r, v + (size_t)t0 * dv, a + r, bb + r,
                        io->log_w ? lw + r : NULL, m, dk, dv, m, &ld, err);
                    if (s != TTT_OK) {
                        free(buf);
                        ttt_error_prefix(err, "ttt_dplr_backward");
                        return s;
                    }
                } else if (ttt_dplr_recurrent_ld(o + (size_t)t0 * dv, dS, q + r, k + r,
                                                 v + (size_t)t0 * dv, a + r, bb + r,
                                                 io->log_w ? lw + r : NULL, m, dk, dv,
                                                 &ld) != TTT_OK) {
                    free(buf);
                    return ttt_error_set(err, TTT_ERR_NOMEM,
                                         "ttt_dplr_backward: out of memory for the recurrent "
                                         "kernel's rows (d_k = %d, d_v = %d)", dk, dv);
                }
            }
            scatter(io->o, o, b, h, T, H, dv);
            if (io->state_out) memcpy(io->state_out + seq * dkv, dS, dkv * sizeof(float));
            /* the backward from dS = ∂L/∂S_T */
            if (g->d_state_out) memcpy(dS, g->d_state_out + seq * dkv, dkv * sizeof(float));
            else memset(dS, 0, dkv * sizeof(float));
            memset(gq, 0, 5 * Tk * sizeof(float));
            memset(gv, 0, Tv * sizeof(float));
            if (chunkwise)
                ttt_dplr_chunkwise_backward(gq, gk, gv, ga, gb, io->log_w ? glw : NULL, dS, dO, q,
                                            k, v, a, bb, io->log_w ? lw : NULL, S0s, T, dk, dv,
                                            C, (double *)(void *)ws);
            else
                ttt_dplr_recurrent_backward(gq, gk, gv, ga, gb, io->log_w ? glw : NULL, dS, dO,
                                            q, k, v, a, bb, io->log_w ? lw : NULL, S0s, T, dk,
                                            dv, C, ws);
            if (g->d_q) scatter(g->d_q, gq, b, h, T, H, dk);
            if (g->d_k) scatter(g->d_k, gk, b, h, T, H, dk);
            if (g->d_a) scatter(g->d_a, ga, b, h, T, H, dk);
            if (g->d_b) scatter(g->d_b, gb, b, h, T, H, dk);
            if (g->d_log_w) scatter(g->d_log_w, glw, b, h, T, H, dk);
            if (g->d_v) scatter(g->d_v, gv, b, h, T, H, dv);
            if (g->d_state_in) memcpy(g->d_state_in + seq * dkv, dS, dkv * sizeof(float));
        }
    free(buf);
    return TTT_OK;
}
