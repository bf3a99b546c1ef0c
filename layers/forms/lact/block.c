/* LaCT as a differentiable closed form (composed.h, ttt_lact_composed): one chain of recorded ops
 * per block instead of the generic driver's per-token loop, so outer-loop training through a
 * LaCT layer costs a few matmuls per block (docs/math.md §1 mini-batch rule, §2 "SwiGLU", §3
 * "large_batch", §4 "LaCT").
 *
 * With apply_then_update and steps: per_block, a block [t0, t0 + n) of the generic driver
 * (layers/layer.c) does exactly this:
 *   - every token reads the block-start weights: o_t = f(W; q_t), so the block's outputs are one
 *     batched application f(W; Q_blk);
 *   - every gradient is taken at the block-start weights (decoupled placement), so the decayed
 *     running sum the driver hands to the optimizer at the block's last token is
 *         G = Σ_i w_i ∇_W ℓ(f(W; k_i), v_i),   w_i = η_i · Π_{i < j < n} α_j,
 *     one batched gradient with per-row weights (below);
 *   - then one optimizer step from (W, state) with G, θ (θ/n with position_scale: inverse, the
 *     driver's θ at the last token) and the block decay A = Π_{0 ≤ j < n} α_j.
 * The step is the optimizer's own `step` (optim/large_batch.c: momentum, Newton–Schulz as one
 * fused tape entry with a hand-written backward (newton_schulz.h; it was ~2/3 of this layer's
 * tape entries when built from small recorded ops), lr, decay, renormalization): the same
 * function the generic driver calls with the same arguments, so every large_batch option has the
 * same meaning in both forms by construction, and the tape differentiates through it. The
 * renormalization targets come from the state, so with learned initial weights (the sequence
 * model rebuilds the state from them, optim.h init_state_ops) they are graph nodes too.
 *
 * The SwiGLU gradient (f(W; x) = (silu(x W0) ⊙ (x W2)) W1, weights (fan_in, fan_out), no
 * residual; docs/math.md §2) is written out here for a block rather than taken from swiglu.c, so that
 * the comparison with the generic driver (tests/test_lact_composed.c) ties two separate
 * derivations. With H = K W0, U = K W2, A = silu(H) ⊙ U and E = diag(w) ∂ℓ/∂Z:
 *     ∂ℓ/∂Z = −V (dot) or A W1 − V (squared, recon);
 *     G_W1 = Aᵀ E,  Δ = E W1ᵀ,  G_W2 = Kᵀ(Δ ⊙ silu(H)),  G_W0 = Kᵀ(Δ ⊙ U ⊙ silu'(H)).
 * silu' is ttt_silu_grad, whose own backward (silu'') lets the outer loop differentiate the inner
 * gradient.
 *
 * The per-row weights come from the cumulative log retentions c = cumsum(log α) of the block as
 * exp(c_{n−1} − c_i) (differences only, ≤ 1 for α ≤ 1) and A = exp(c_{n−1}); the driver forms
 * the same numbers as products, which differ in float rounding only.
 *
 * Precision: Newton–Schulz amplifies directions with small singular values up to ~490× (5 steps
 * of slope 3.4445), so both forms are float32 evaluations of a function whose gradients move by
 * 6e-4…8e-3 of their size when the inputs change by 2e-7 relative; the two agree to that floor
 * (tests/test_lact_composed.c measures it), and training runs of the two drift apart after a
 * few outer steps as a run does when its learning rate is changed by 3e-6 relative. */
#include <string.h>

#include "composed.h"

/* The weighted block gradient above. G (3): G_W0 (d_k, d_h), G_W1 (d_h, d_v), G_W2 (d_k, d_h);
 * W the block-start weights; K (n, d_k), V (n, d_v); w (n) or NULL (= 1); dot: the loss's
 * gradient is −v (else z − v). */
static void swiglu_block_grad(ttt_ctx *ctx, ttt_tensor **G, const ttt_tensor *const *W,
                              const ttt_tensor *K, const ttt_tensor *V, const ttt_tensor *w,
                              int dot) {
    ttt_tensor *H = ttt_matmul(ctx, K, 0, W[0], 0); /* (n, d_h) */
    ttt_tensor *U = ttt_matmul(ctx, K, 0, W[2], 0); /* (n, d_h) */
    ttt_tensor *sH = ttt_silu(ctx, H);              /* (n, d_h) */
    ttt_tensor *A = ttt_mul(ctx, sH, U);            /* (n, d_h) */
    ttt_tensor *E = dot ? ttt_neg(ctx, V) : ttt_sub(ctx, ttt_matmul(ctx, A, 0, W[1], 0), V);
    if (w) E = ttt_scale_rows(ctx, E, w);             /* (n, d_v) */
    G[1] = ttt_matmul(ctx, A, 1, E, 0);               /* (d_h, d_v) */
    ttt_tensor *D = ttt_matmul(ctx, E, 0, W[1], 1);   /* Δ (n, d_h) */
    G[2] = ttt_matmul(ctx, K, 1, ttt_mul(ctx, D, sH), 0); /* (d_k, d_h) */
    G[0] = ttt_matmul(ctx, K, 1, ttt_mul(ctx, ttt_mul(ctx, D, U), ttt_silu_grad(ctx, H)), 0);
}

static void copy_values(ttt_tensor *dst, const ttt_tensor *src) {
    TTT_ASSERT(dst->n == src->n);
    if (dst != src) memcpy(dst->data, src->data, src->n * sizeof(float));
}

ttt_status ttt_lact_composed(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                             ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                             const ttt_tensor *v, const ttt_tensor *eta,
                             const ttt_tensor *log_alpha, ttt_error *err) {
    const ttt_form_inputs in = {.T = TTT_ROWS(k), .eta = eta != NULL,
                                .gate = !log_alpha ? TTT_FORM_GATE_NONE
                                        : log_alpha->ndim != 1 ? TTT_FORM_GATE_KEY
                                                               : TTT_FORM_GATE_TOKEN,
                                .tape = ttt_recording(ctx)};
    const char *why = ttt_lact_available(L, &in);
    if (why) return ttt_error_set(err, TTT_ERR_UNSUPPORTED, "%s", why);
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    log_alpha = ttt_form_gates_floored(ctx, log_alpha); /* resets (kernels.h) */
    const int nw = st->n_w, ns = st->n_opt, tape = ttt_recording(ctx);
    if (q->ndim != 2 || k->ndim != 2 || v->ndim != 2 || TTT_ROWS(q) != T || TTT_ROWS(v) != T ||
        TTT_COLS(q) != d_k || o->ndim != 2 || TTT_ROWS(o) != T || TTT_COLS(o) != d_v ||
        (eta && eta->n != (size_t)T) || (log_alpha && log_alpha->n != (size_t)T) || nw != 3)
        return ttt_error_set(err, TTT_ERR_SHAPE, "LaCT closed form: inputs do not fit T = %d", T);
    const int dot = L->loss->z_free; /* ∂ℓ/∂z = −v */
    /* the running weights and optimizer state: graph nodes with a tape, st's tensors (updated
     * in place after every block) without one */
    ttt_tensor *W[3], *S[3][TTT_MAX_OPT_STATE];
    for (int w = 0; w < nw; w++) {
        W[w] = st->W[w];
        for (int s = 0; s < ns; s++) S[w][s] = st->opt[w][s];
    }
    const int b = L->mini_batch, nb = T > 0 ? (T + b - 1) / b : 0;
    ttt_tensor **parts = tape && nb ? ttt_tape_alloc(ctx, (size_t)nb * sizeof *parts) : NULL;
    for (int c = 0; c < nb; c++) {
        const int t0 = c * b, t1 = t0 + b < T ? t0 + b : T, n = t1 - t0;
        ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
        ttt_tensor *Qb = ttt_slice_rows(ctx, q, t0, t1), *Kb = ttt_slice_rows(ctx, k, t0, t1);
        ttt_tensor *Vb = ttt_slice_rows(ctx, v, t0, t1);
        ttt_tensor *wts = eta ? ttt_slice_rows(ctx, eta, t0, t1) : NULL; /* (n) */
        ttt_tensor *A = NULL;                                             /* (1) */
        if (log_alpha) {
            ttt_tensor *cl = ttt_cumsum(ctx, ttt_slice_rows(ctx, log_alpha, t0, t1)); /* (n) */
            ttt_tensor *cn = ttt_slice_rows(ctx, cl, n - 1, n);                     /* (1) */
            ttt_tensor *f = ttt_exp(ctx, ttt_neg(ctx, ttt_sub(ctx, cl, cn))); /* e^{c_n − c_i} */
            wts = wts ? ttt_mul(ctx, wts, f) : f;
            A = ttt_exp(ctx, cn);
        }
        /* apply_then_update: the block reads the weights from before its own update */
        ttt_tensor *Ob = L->model->apply(ctx, (const ttt_tensor *const *)W, Qb); /* (n, d_v) */
        if (tape) parts[c] = Ob;
        else memcpy(o->data + (size_t)t0 * d_v, Ob->data, Ob->n * sizeof(float));
        ttt_tensor *G[3];
        swiglu_block_grad(ctx, G, (const ttt_tensor *const *)W, Kb, Vb, wts, dot);
        const ttt_optim_block blk = {
            .t0 = t0, .n = n, .theta = L->pos_inverse ? L->lr / (float)n : L->lr, .decay = A};
        for (int w = 0; w < nw; w++) {
            ttt_tensor *wo = NULL, *so[TTT_MAX_OPT_STATE] = {0};
            L->optim->step(ctx, L->optim_cfg, &wo, so, W[w], (const ttt_tensor *const *)S[w],
                           G[w], &blk);
            if (tape) {
                W[w] = wo;
                for (int s = 0; s < ns; s++) S[w][s] = so[s];
            } else {
                copy_values(W[w], wo);
                for (int s = 0; s < ns; s++) copy_values(S[w][s], so[s]);
            }
        }
        if (!tape) ttt_arena_release(ctx->arena, mark);
    }
    if (tape) {
        for (int w = 0; w < nw; w++) {
            st->W[w] = W[w];
            for (int s = 0; s < ns; s++) st->opt[w][s] = S[w][s];
        }
        if (nb) {
            ttt_tensor *O = nb == 1 ? parts[0]
                                    : ttt_concat_rows_n(ctx, (const ttt_tensor *const *)parts, nb);
            memcpy(o->data, O->data, O->n * sizeof(float));
            ttt_tape_entry *e = ttt_tape_record(ctx, ttt_backward_identity, o,
                                                (const ttt_tensor *const[]){O}, 1);
            if (e) e->name = "lact_out";
        }
    }
    return TTT_OK;
}
