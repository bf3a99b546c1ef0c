/* The generic TTT layer driver (docs/math.md §1): any registered tuple, token by token. */
#include "form.h"

#include <math.h>
#include <string.h>

#include "autograd.h"
#include "composed.h"

/* ------------------------------------------------------------------------------------------ */
/* The generic driver (docs/math.md §1).
 *
 * Inside a block starting at W_0, token i of the block (global t) contributes
 *     g_i = η_t ∇ℓ(f(W_g; k_t), v_t),  W_g = W_0 (decoupled) or A_i·W_0 (coupled),
 * with A_i the product of the retentions α over the block prefix 0..i.
 *
 * steps: per_block — the optimizer receives the decayed running sum G_i = α_t G_{i−1} + g_i (so
 * earlier writes fade exactly as in the recurrence, and for a W-independent gradient any b
 * reproduces b = 1) and the decay A_i; token t reads f(step(W_0, G_i, A_i); q_t), and the block
 * ends with that step's weights and state.
 * steps: per_token — the optimizer steps after every token from the previous token's weights and
 * state with g_i and the token's own α_t (gradients still at W_0): Titans' chunked momentum.
 * For SGD the two coincide. apply_then_update: every token reads f(W_0; q_t).
 * With b = 1 every variant is exactly the per-token rule of docs/math.md §3. */

static void copy_into(ttt_tensor *dst, const ttt_tensor *src) {
    TTT_ASSERT(dst->n == src->n);
    memcpy(dst->data, src->data, src->n * sizeof(float));
}

/* Without a tape, per-token temporaries are released after every token: what must survive (the
 * stepped weights and state, the running gradient, the prefix decay) is copied into a buffer
 * allocated once. With a tape nothing is released or copied: every tensor stays a node of the
 * graph, so outer-loop training differentiates through the whole inner loop. */
static void keep(ttt_ctx *ctx, ttt_tensor **t, ttt_tensor *buffer) {
    if (ttt_recording(ctx) || *t == buffer) return;
    copy_into(buffer, *t);
    *t = buffer;
}

/* Backward of the output assembly: row t of dL/do goes to the row tensor that produced it. */
static void gather_rows_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dout) {
    const int d = e->iarg[0];
    for (int t = 0; t < e->n_in; t++) {
        if (!e->in[t]->requires_grad) continue;
        float *g = ttt_grad(ctx, e->in[t]);
        for (int j = 0; j < d; j++) g[j] += dout[(size_t)t * d + j];
    }
}

/* The driver as a one-step form, for the interleaved sub-steps of steps_per_token > 1. */
static ttt_status generic_one_step(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                   ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    return ttt_forward_generic(ctx, L, o, st, a->q, a->k, a->v, a->eta, a->log_alpha,
                               a->alpha_vec, err);
}

ttt_status ttt_forward_generic(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                               ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                                  const ttt_tensor *v, const ttt_tensor *eta,
                                  const ttt_tensor *log_alpha, int alpha_vec, ttt_error *err) {
    if (L->substeps > 1) {
        /* n_h steps per token (docs/math.md §4.7): the definition is the one-step rule on the
         * interleaved sub-steps, the gate once per token before them and the read-out after */
        if (alpha_vec)
            return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                                 "steps_per_token > 1 takes a gate per token (T), not one per "
                                 "key dimension");
        const ttt_form_args a = {.q = q, .k = k, .v = v, .eta = eta, .log_alpha = log_alpha};
        return ttt_delta_product_interleaved(ctx, L, o, st, &a, generic_one_step, err);
    }
    const ttt_model *M = L->model;
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v), nw = st->n_w,
              ns = st->n_opt, tape = ttt_recording(ctx);
    /* A retention per key dimension scales the rows of S (GLA): it is defined for the linear
     * model, whose rows are key dimensions, and not for models with hidden layers. */
    if (alpha_vec && !(M->traits & TTT_MODEL_LINEAR_MAP))
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "a decay per key dimension (log_alpha of shape (T, d_k)) is defined "
                             "for the linear model only, not for model %s",
                             M->name);
    /* Buffers that outlive a token when nothing is recorded. */
    ttt_tensor *bG[TTT_MAX_WEIGHTS], *bW[TTT_MAX_WEIGHTS], *bS[TTT_MAX_WEIGHTS][TTT_MAX_OPT_STATE];
    ttt_tensor *bA = ttt_tensor_1d(ctx, alpha_vec ? d_k : 1);
    for (int w = 0; w < nw; w++) {
        bG[w] = ttt_tensor_zeros_like(ctx, st->W[w]);
        bW[w] = ttt_tensor_zeros_like(ctx, st->W[w]);
        /* each state tensor has its own declared shape (optim.h state_shape) */
        for (int s = 0; s < ns; s++) bS[w][s] = ttt_tensor_zeros_like(ctx, st->opt[w][s]);
    }
    ttt_tensor **rows = tape ? ttt_tape_alloc(ctx, (size_t)T * sizeof *rows) : NULL;
    /* the retentions' accumulated rounding, one per gate value of a token (ttt_gate_dither) */
    const int n_gate = alpha_vec ? d_k : 1;
    double *drift = log_alpha ? ttt_arena_alloc(ctx->arena, sizeof(double) * (size_t)n_gate) : NULL;
    if (log_alpha && !drift)
        return ttt_error_set(err, TTT_ERR_NOMEM, "generic form: out of memory for the gate drift");
    for (int j = 0; log_alpha && j < n_gate; j++) drift[j] = 1.0;
    const int b = L->mini_batch;
    const ttt_tensor *la_rows =
        log_alpha && alpha_vec ? log_alpha : NULL; /* (T, d_k): a row per token */
    /* the rule's outer parameters (a learned optimizer), and the inputs of the block's tokens
     * for a rule that reads them (rls): given when they are the inputs of the model's weight,
     * i.e. for a linear map k W */
    const ttt_tensor *const *outer = st->n_outer ? (const ttt_tensor *const *)st->outer : NULL;
    const int want_x = ttt_layer_optim_traits(L).inputs && (M->traits & TTT_MODEL_LINEAR_MAP);

    for (int t0 = 0; t0 < T; t0 += b) {
        const int n = t0 + b <= T ? b : T - t0;
        /* block start: W_0 and the optimizer state at it */
        ttt_tensor *W0[TTT_MAX_WEIGHTS], *S0[TTT_MAX_WEIGHTS][TTT_MAX_OPT_STATE];
        ttt_tensor *Wn[TTT_MAX_WEIGHTS], *Sn[TTT_MAX_WEIGHTS][TTT_MAX_OPT_STATE];
        ttt_tensor *G[TTT_MAX_WEIGHTS] = {0}, *A = NULL;
        for (int w = 0; w < nw; w++) {
            W0[w] = Wn[w] = st->W[w];
            for (int s = 0; s < ns; s++) S0[w][s] = Sn[w][s] = st->opt[w][s];
        }
        for (int i = 0; i < n; i++) {
            const int t = t0 + i;
            /* a stop asked of this computation (tensor.h, ttt_ctx.stop): a token of a wide MLP
             * takes tens of milliseconds, a sequence minutes */
            if (ttt_ctx_stopped(ctx)) return ttt_error_set(err, TTT_ERR_INTERRUPTED, "interrupted");
            ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
            /* this token's retention α_t and the block prefix decay A_i = α_{t0} ⋯ α_t, as
             * tensors so that learned gates receive gradients */
            ttt_tensor *alpha_t = NULL;
            if (log_alpha) {
                ttt_tensor *la = ttt_slice_rows(ctx, la_rows ? la_rows : log_alpha, t, t + 1);
                if (la_rows) la = ttt_reshape(ctx, la, 1, (int[]){d_k});
                alpha_t = ttt_exp(ctx, la);
                /* each retention rounded so that their running product stays exact (kernels.h
                 * ttt_gate_dither): the value moves by at most one float32 step, the gradient
                 * of the recorded exp is unchanged */
                for (size_t j = 0; j < alpha_t->n; j++)
                    alpha_t->data[j] = ttt_gate_dither(&drift[j], exp((double)la->data[j]));
                A = i == 0 ? alpha_t : ttt_mul(ctx, A, alpha_t);
            }
            const float theta = L->pos_inverse ? L->lr / (float)(i + 1) : L->lr;
            ttt_optim_block blk = {.t0 = t0, .n = i + 1, .theta = theta, .decay = A,
                                   .outer = outer};
            ttt_optim_block tok = {.t0 = t, .n = 1, .theta = theta, .decay = alpha_t,
                                   .outer = outer};
            /* the point where the gradient is taken */
            const ttt_tensor *Wg[TTT_MAX_WEIGHTS];
            for (int w = 0; w < nw; w++)
                Wg[w] = L->coupled && A ? ttt_optim_apply_decay(ctx, W0[w], &blk) : W0[w];
            ttt_tensor *xk = ttt_slice_rows(ctx, k, t, t + 1); /* (1, d_k) */
            ttt_tensor *xv = ttt_slice_rows(ctx, v, t, t + 1); /* (1, d_v) */
            ttt_tensor *et = eta ? ttt_slice_rows(ctx, eta, t, t + 1) : NULL; /* (1) */
            if (want_x) { /* the tokens a step's gradient covers: the block so far, or this one */
                tok.x = xk, tok.x_eta = et;
                blk.x = i == 0 ? xk : ttt_slice_rows(ctx, k, t0, t + 1); /* (i+1, d_k) */
                blk.x_eta = !eta ? NULL : i == 0 ? et : ttt_slice_rows(ctx, eta, t0, t + 1);
            }
            ttt_tensor *z = L->loss->z_free ? NULL : M->apply(ctx, Wg, xk);
            ttt_tensor *dz = L->loss->grad(ctx, z, xv);
            ttt_tensor *g[TTT_MAX_WEIGHTS];
            M->grad(ctx, g, Wg, xk, dz, et);
            const int last = i == n - 1;
            for (int w = 0; w < nw; w++) {
                ttt_tensor *wo = NULL, *so[TTT_MAX_OPT_STATE] = {0};
                if (L->step_per_token) {
                    L->optim->step(ctx, L->optim_cfg, &wo, so, Wn[w],
                                   (const ttt_tensor *const *)Sn[w], g[w], &tok);
                } else {
                    /* G_i = α_t G_{i−1} + g_i, stepped from the block start */
                    G[w] = i == 0 ? g[w]
                                  : ttt_add(ctx, alpha_t ? ttt_optim_apply_decay(ctx, G[w], &tok)
                                                         : G[w],
                                            g[w]);
                    if (L->order == TTT_ORDER_APPLY_THEN_UPDATE && !last) {
                        keep(ctx, &G[w], bG[w]);
                        continue;
                    }
                    L->optim->step(ctx, L->optim_cfg, &wo, so, W0[w],
                                   (const ttt_tensor *const *)S0[w], G[w], &blk);
                    keep(ctx, &G[w], bG[w]);
                }
                Wn[w] = wo;
                keep(ctx, &Wn[w], bW[w]);
                for (int s = 0; s < ns; s++) {
                    Sn[w][s] = so[s];
                    keep(ctx, &Sn[w][s], bS[w][s]);
                }
            }
            if (A) keep(ctx, &A, bA);
            /* read-out */
            ttt_tensor *xq = ttt_slice_rows(ctx, q, t, t + 1);
            ttt_tensor *ot = M->apply(ctx,
                                      L->order == TTT_ORDER_UPDATE_THEN_APPLY
                                          ? (const ttt_tensor *const *)Wn
                                          : (const ttt_tensor *const *)W0,
                                      xq);
            memcpy(o->data + (size_t)t * d_v, ot->data, (size_t)d_v * sizeof(float));
            if (tape) rows[t] = ot;
            else ttt_arena_release(ctx->arena, mark);
        }
        /* block end: the state moves to the last step's weights */
        for (int w = 0; w < nw; w++) {
            if (tape) {
                st->W[w] = Wn[w];
                for (int s = 0; s < ns; s++) st->opt[w][s] = Sn[w][s];
            } else {
                if (Wn[w] != st->W[w]) copy_into(st->W[w], Wn[w]);
                for (int s = 0; s < ns; s++)
                    if (Sn[w][s] != st->opt[w][s]) copy_into(st->opt[w][s], Sn[w][s]);
            }
        }
    }
    if (tape) {
        ttt_tape_entry *e = ttt_tape_record(ctx, gather_rows_backward, o,
                                            (const ttt_tensor *const *)rows, T);
        if (e) e->iarg[0] = d_v;
    }
    return TTT_OK;
}


/* ------------------------------------------------------------------------------------------ */
/* Its registry entry: computes every tuple, so `form: auto` falls back to it. */

/* A retention per key dimension scales the rows of W: defined where rows are key dimensions. */
static const char *generic_available(const ttt_layer *L, const ttt_form_inputs *in) {
    if (in && in->gate == TTT_FORM_GATE_KEY && L->substeps > 1)
        return "steps_per_token > 1 (Gated DeltaProduct) takes a gate per token (T), not one per "
               "key dimension";
    if (in && in->gate == TTT_FORM_GATE_KEY && !(L->model->traits & TTT_MODEL_LINEAR_MAP))
        return "a decay per key dimension (log_alpha of shape (T, d_k)) is defined for a linear "
               "model only (its rows are the key dimensions)";
    return NULL;
}

static ttt_status generic_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                  ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    return ttt_forward_generic(ctx, L, o, st, a->q, a->k, a->v, a->eta, a->log_alpha,
                               a->alpha_vec, err);
}

double ttt_layer_weight_floats(const ttt_layer *L, double *gram) {
    double total = 0;
    *gram = 0;
    for (int w = 0; w < L->model->n_weights; w++) {
        int shape[TTT_MAX_DIMS];
        const int nd = L->model->shape(w, L->d_phi, L->d_v, shape); /* the state's rows */
        double n = 1;
        for (int d = 0; d < nd; d++) n *= shape[d];
        total += n * (L->levels > 1 ? L->levels : 1); /* Λ levels of state (docs/math.md §4.8) */
        if (nd == 2) {
            const double m = shape[0] < shape[1] ? shape[0] : shape[1];
            *gram += m * m;
        }
    }
    return total;
}

int ttt_layer_opt_state_count(const ttt_layer *L) {
    return ttt_optim_n_state(L->optim, L->optim_cfg);
}

double ttt_layer_opt_state_floats(const ttt_layer *L) {
    double total = 0;
    for (int w = 0; w < L->model->n_weights; w++) {
        int shape[TTT_MAX_DIMS];
        const int nd = L->model->shape(w, L->d_phi, L->d_v, shape); /* the state's rows */
        total += ttt_optim_state_floats(L->optim, L->optim_cfg, shape, nd);
    }
    return total;
}

/* The driver keeps (2 + n_state) block buffers per weight and makes per token a handful of
 * weight-sized temporaries (decayed copy, gradient, sum, step results); Newton–Schulz adds
 * Gram-sized matrices. Per-token activations are (1, width). Tensor headers and the arena's
 * 64-byte alignment: up to 64 live tensors of 128 bytes (2048 floats), which dominate at small d
 * (measured: 3584 bytes for ttt_linear at d = 4). */
double ttt_generic_scratch_bytes(const ttt_layer *L, long T) {
    double gram;
    const double w = ttt_layer_weight_floats(L, &gram);
    const int ns = ttt_layer_opt_state_count(L);
    /* steps_per_token > 1: the interleaved q, gates, β and outputs of n_h·T sub-steps and their
     * sliced outputs (ttt_delta_product_interleaved), 16 floats of alignment each */
    const double nh = L->substeps > 1 ? L->substeps : 0;
    const double sub = nh * (double)T * (2.0 * L->d_k + 2.0 * L->d_v + 3) + nh * 8 * 16;
    return ((12.0 + 3 * ns) * w + 6 * gram + 64.0 * (L->d_k + L->d_v) + 2048 + sub) *
           sizeof(float);
}

const ttt_form_entry ttt_form_generic_generic = {
    .family = "generic",
    .form = "generic",
    .help = "the generic driver: any (model, loss, optimizer, b, ordering), token by token",
    .auto_rank = 1,
    .available = generic_available,
    .forward = generic_forward,
    .forward_diff = generic_forward, /* written in ops: differentiable as it stands */
    .forward_strided = NULL,
    .scratch_bytes = ttt_generic_scratch_bytes,
    .flops = NULL,
    .precise_t = 1024, /* docs/forms.md "Precision on hard inputs" */
};
