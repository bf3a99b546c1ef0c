/* The generic TTT layer driver (docs/math.md §1): the state, one pass over a sequence through the
 * form the registry chooses, and the read-out. Its configuration: layers/layer_options.c,
 * layer_presets.c, layer_resolve.c, layer_build.c, layer_parse.c. */
#include "layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "composed.h"
#include "feature_maps.h"
#include "kernels.h"
#include "normalized.h"
#include "rope.h"
#include "ttt_dual.h"

/* ------------------------------------------------------------------------------------------ */
/* State */

ttt_layer ttt_layer_inner(const ttt_layer *L) {
    ttt_layer in = *L;
    in.d_k = L->d_phi;
    return in;
}

void ttt_layer_state_init(ttt_ctx *ctx, const ttt_layer *Lo, ttt_layer_state *st, ttt_rng *rng) {
    const ttt_layer inner = ttt_layer_inner(Lo), *L = &inner; /* rows: the feature width */
    memset(st, 0, sizeof *st);
    st->n_w = L->model->n_weights;
    st->n_opt = ttt_optim_n_state(L->optim, L->optim_cfg);
    TTT_ASSERT(st->n_w <= TTT_MAX_WEIGHTS && st->n_opt <= TTT_MAX_OPT_STATE);
    for (int w = 0; w < st->n_w; w++) {
        int shape[TTT_MAX_DIMS];
        int nd = L->model->shape(w, L->d_k, L->d_v, shape);
        if (L->levels > 1) shape[0] *= L->levels; /* the levels, one after the other (docs/math.md §4.8) */
        st->W[w] = ttt_tensor_new(ctx, nd, shape);
        ttt_tensor_fill(st->W[w], 0.0f);
    }
    L->model->init(st->W, L->d_k, L->d_v, rng);
    if (L->normalize == TTT_NORMALIZE_RATIO) {
        st->z = ttt_tensor_2d(ctx, L->d_k, 1);
        ttt_tensor_fill(st->z, 0.0f);
    }
    /* the state of the shapes the optimizer declares (optim.h state_shape), from the
     * initialized weights */
    for (int w = 0; w < st->n_w; w++)
        ttt_optim_state_new(ctx, L->optim, L->optim_cfg, st->opt[w], st->W[w]);
    /* the rule's own outer parameters at their initialization (none for hand-written rules) */
    st->n_outer = ttt_optim_outer_new(ctx, L->optim, L->optim_cfg, st->outer);
}

/* One pass of the form the registry chooses for these inputs (form.h): its forward, or — with a
 * tape — its differentiable forward_diff (fused ops where the entry has them). */
static ttt_status run_form(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o, ttt_layer_state *st,
                           const ttt_form_args *a, ttt_error *err) {
    const ttt_form_inputs in = {.T = TTT_ROWS(a->q), .eta = a->eta != NULL,
                                .gate = !a->log_alpha ? TTT_FORM_GATE_NONE
                                        : a->alpha_vec ? TTT_FORM_GATE_KEY
                                                       : TTT_FORM_GATE_TOKEN,
                                .tape = ttt_recording(ctx)};
    ttt_form_plan plan;
    const ttt_form_entry *e = ttt_form_plan_with(NULL, L, &in, &plan, err);
    if (!e) return TTT_ERR_UNSUPPORTED;
    /* form: auto may run another chunk than layer.chunk (the measured fastest) */
    ttt_layer run = *L;
    run.chunk = plan.chunk;
    return in.tape ? e->forward_diff(ctx, &run, o, st, a, err)
                   : e->forward(ctx, &run, o, st, a, err);
}

const char *ttt_layer_form_used(const ttt_layer *L, const ttt_form_inputs *in) {
    const ttt_form_entry *e = ttt_form_choose(L, in, NULL);
    return e ? e->form : "none";
}

ttt_status ttt_layer_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                             ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                             const ttt_tensor *v, const ttt_tensor *eta,
                             const ttt_tensor *log_alpha, ttt_error *err) {
    /* n_h steps per token (docs/math.md §4.7): k, v and η have n_h rows per token */
    const int nh = L->substeps > 1 ? L->substeps : 1;
    const int T = TTT_ROWS(q);
    const long Tk = (long)nh * T;
    /* levels Λ (docs/math.md §4.8): q holds every level's query, (T, Λ·d_k) */
    const int nq = L->levels > 1 ? L->levels : 1;
    char s1[48], s2[48], s3[48];
    if (nq > 1 && (TTT_COLS(q) != nq * L->d_k || TTT_COLS(k) != L->d_k ||
                   TTT_COLS(v) != L->d_v || TTT_ROWS(k) != T || TTT_ROWS(v) != T ||
                   TTT_ROWS(o) != T || TTT_COLS(o) != L->d_v))
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "layer inputs q %s, k %s, v %s do not fit d_k = %d, d_v = %d "
                             "with levels = %d (q: the %d levels' queries side by side, %d "
                             "columns)",
                             ttt_tensor_shape_str(q, s1, sizeof s1),
                             ttt_tensor_shape_str(k, s2, sizeof s2),
                             ttt_tensor_shape_str(v, s3, sizeof s3), L->d_k, L->d_v, nq, nq,
                             nq * L->d_k);
    if (nq == 1 && (TTT_COLS(q) != L->d_k || TTT_COLS(k) != L->d_k || TTT_COLS(v) != L->d_v ||
        TTT_ROWS(k) != Tk || TTT_ROWS(v) != Tk || TTT_ROWS(o) != T || TTT_COLS(o) != L->d_v)) {
        if (nh > 1)
            return ttt_error_set(err, TTT_ERR_SHAPE,
                                 "layer inputs q %s, k %s, v %s do not fit d_k = %d, d_v = %d "
                                 "with steps_per_token = %d (k and v: %d rows per query row)",
                                 ttt_tensor_shape_str(q, s1, sizeof s1),
                                 ttt_tensor_shape_str(k, s2, sizeof s2),
                                 ttt_tensor_shape_str(v, s3, sizeof s3), L->d_k, L->d_v, nh,
                                 nh);
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "layer inputs q %s, k %s, v %s do not fit d_k = %d, d_v = %d",
                             ttt_tensor_shape_str(q, s1, sizeof s1),
                             ttt_tensor_shape_str(k, s2, sizeof s2),
                             ttt_tensor_shape_str(v, s3, sizeof s3), L->d_k, L->d_v);
    }
    if (eta && (long)eta->n != Tk)
        return nh > 1 ? ttt_error_set(err, TTT_ERR_SHAPE,
                                      "eta has %zu entries for %ld key/value rows (%d tokens, "
                                      "steps_per_token = %d)",
                                      eta->n, Tk, T, nh)
                      : ttt_error_set(err, TTT_ERR_SHAPE, "eta has %zu entries for %d tokens",
                                      eta->n, T);
    int alpha_vec = log_alpha && log_alpha->ndim == 2;
    if (log_alpha && !((log_alpha->ndim == 1 && (int)log_alpha->n == T) ||
                       (alpha_vec && TTT_ROWS(log_alpha) == T && TTT_COLS(log_alpha) == L->d_k)))
        return ttt_error_set(err, TTT_ERR_SHAPE, "log_alpha %s fits neither (T) nor (T, d_k)",
                             ttt_tensor_shape_str(log_alpha, s1, sizeof s1));
    if (alpha_vec && L->d_phi != L->d_k)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "log_alpha %s: a gate per key dimension does not apply to the %d "
                             "features of feature_map %s (they are not key dimensions); give a "
                             "gate per token (T)",
                             ttt_tensor_shape_str(log_alpha, s1, sizeof s1), L->d_phi,
                             L->fmap->name);
    if (L->feature_gate && (alpha_vec || (!log_alpha && L->decay == 1.0f)))
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "feature_gate weights token t's write by 1 - alpha_t: it needs a "
                             "gate per token (T) or a constant decay < 1, got %s",
                             alpha_vec ? "a gate per key dimension" : "no gate");

    const int tape = ttt_recording(ctx);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    /* Constant decay from the optimizer options when no per-token gates are given. */
    if (!log_alpha && L->decay != 1.0f) {
        ttt_tensor *la = ttt_tensor_1d(ctx, T);
        ttt_tensor_fill(la, logf(L->decay));
        log_alpha = la;
    }
    if (L->scale != 1.0f) q = ttt_scale(ctx, q, L->scale);
    if (L->rope && tape) {
        /* the recorded op (its backward is the inverse rotation) */
        q = ttt_rope(ctx, q, (int)st->pos, L->rope_base);
        k = ttt_rope(ctx, k, (int)st->pos, L->rope_base);
    } else if (L->rope) {
        /* positions continue from the carried state, so a split sequence resumes exactly */
        ttt_tensor *qr = ttt_tensor_2d(ctx, T, L->d_k), *kr = ttt_tensor_2d(ctx, T, L->d_k);
        ttt_rope_apply(qr->data, q->data, T, L->d_k, (int)st->pos, L->rope_base);
        ttt_rope_apply(kr->data, k->data, T, L->d_k, (int)st->pos, L->rope_base);
        q = qr;
        k = kr;
    }
    if (L->normalize == TTT_NORMALIZE_RATIO) {
        /* φ on q and k (feature_maps.h); a random map's matrix is drawn again from its seed at
         * every call, so it is the same for every call, head and training step */
        const float *omega = ttt_feature_omega(ctx, L->fmap, L->d_k, L->features, L->feature_seed);
        q = ttt_feature_apply(ctx, L->fmap, omega, L->features, TTT_FEATURE_QUERY, q);
        k = ttt_feature_apply(ctx, L->fmap, omega, L->features, TTT_FEATURE_KEY, k);
    }
    if (L->feature_gate) {
        /* RFA's gate: S_t = α_t S_{t−1} + (1 − α_t) φ(k_t)ᵀ v_t (and z likewise), i.e. the
         * per-token rates η_t scaled by 1 − α_t (docs/math.md "Random features") */
        ttt_tensor *w = ttt_add_scalar(ctx, ttt_neg(ctx, ttt_exp(ctx, log_alpha)), 1.0f);
        eta = eta ? ttt_mul(ctx, eta, w) : w;
    }
    const ttt_layer inner = ttt_layer_inner(L); /* what the forms see: key width d_phi */
    /* With a tape the closed forms run differentiably (layers/forms/composed.c: fused ops with
     * hand-written backward where they exist, composed ops elsewhere); β = θ·η is recorded so
     * that learned learning rates receive gradients. */
    const ttt_tensor *beta = tape && eta ? ttt_scale(ctx, eta, L->lr) : NULL;
    const ttt_form_args args = {.q = q, .k = k, .v = v, .eta = eta, .beta = beta,
                                .log_alpha = log_alpha, .alpha_vec = alpha_vec, .fused = 1};
    /* The form's output (T, d_v). Without a tape the form writes straight into the caller's o
     * (which must not alias the inputs): no temporary to fault in, no copy. With a tape o is
     * recorded as a separate node below. */
    ttt_tensor *res = !tape && o->ndim == 2 ? o : ttt_tensor_2d(ctx, T, L->d_v);
    ttt_status s = run_form(ctx, &inner, res, st, &args, err);
    if (s == TTT_OK && L->normalize == TTT_NORMALIZE_RATIO) {
        /* The denominator q_t z_t is the same layer run with a single value column of ones
         * (docs/math.md §6 item 9): z is its (d_k, 1) state. */
        ttt_layer L1 = inner;
        L1.d_v = 1;
        L1.normalize = TTT_NORMALIZE_NONE;
        L1.rope = 0;
        L1.scale = 1.0f;
        ttt_layer_state s1 = {.n_w = 1, .W = {st->z}};
        ttt_tensor *ones = ttt_tensor_2d(ctx, T, 1), *den = ttt_tensor_2d(ctx, T, 1);
        ttt_tensor_fill(ones, 1.0f);
        ttt_form_args a1 = args;
        a1.v = ones;
        s = run_form(ctx, &L1, den, &s1, &a1, err);
        st->z = s1.W[0];
        /* o / (φ(q) z + ε), as ops; the denominator is positive for the positive maps (elu1,
         * favor) and of either sign for rfa, whose features can be negative */
        ttt_tensor *inv = ttt_div(ctx, ones, ttt_add_scalar(ctx, den, TTT_NLA_EPS));
        res = ttt_scale_rows(ctx, res, ttt_reshape(ctx, inv, 1, (int[]){T}));
    }
    if (s == TTT_OK && L->normalize == TTT_NORMALIZE_RMS)
        res = ttt_rmsnorm(ctx, res, NULL, TTT_POSTNORM_EPS);
    if (s == TTT_OK) {
        if (res != o) memcpy(o->data, res->data, res->n * sizeof(float));
        if (tape) {
            /* o is the caller's tensor: make it the graph's output */
            const ttt_tensor *in[1] = {res};
            ttt_tape_record(ctx, ttt_backward_identity, o, in, 1);
        }
        st->pos += T;
    }
    /* With a tape every intermediate is part of the graph and stays; without one, release. */
    if (!tape) ttt_arena_release(ctx->arena, mark);
    return s;
}

ttt_status ttt_layer_read(ttt_ctx *ctx, const ttt_layer *L, const ttt_layer_state *st,
                          ttt_tensor *o, const ttt_tensor *q, ttt_error *err) {
    const int n = TTT_ROWS(q);
    /* levels Λ > 1 (docs/math.md §4.8): each query row holds the Λ levels' queries, read
     * against the levels as they stand: o = Σ_ℓ q^ℓ S^ℓ */
    const int nq = L->levels > 1 ? L->levels : 1;
    if (TTT_COLS(q) != nq * L->d_k || TTT_ROWS(o) != n || TTT_COLS(o) != L->d_v)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "layer read: queries (%d, %d) for d_k = %d and %d level(s): "
                             "expected %d columns",
                             n, TTT_COLS(q), L->d_k, nq, nq * L->d_k);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    if (L->scale != 1.0f) q = ttt_scale(ctx, q, L->scale);
    if (L->rope) {
        ttt_tensor *qr = ttt_tensor_2d(ctx, n, L->d_k);
        for (int i = 0; i < n; i++) /* every query at the next position */
            ttt_rope_apply(qr->data + (size_t)i * L->d_k, q->data + (size_t)i * L->d_k, 1, L->d_k,
                           (int)st->pos, L->rope_base);
        q = qr;
    }
    if (L->normalize == TTT_NORMALIZE_RATIO) {
        const float *omega = ttt_feature_omega(ctx, L->fmap, L->d_k, L->features, L->feature_seed);
        q = ttt_feature_apply(ctx, L->fmap, omega, L->features, TTT_FEATURE_QUERY, q);
    }
    ttt_tensor *z = L->model->apply(ctx, (const ttt_tensor *const *)st->W, q);
    memcpy(o->data, z->data, z->n * sizeof(float));
    if (L->normalize == TTT_NORMALIZE_RATIO) {
        ttt_tensor *den = ttt_matmul(ctx, q, 0, st->z, 0); /* (n, 1) */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < L->d_v; j++)
                o->data[(size_t)i * L->d_v + j] /= den->data[i] + TTT_NLA_EPS;
    }
    if (L->normalize == TTT_NORMALIZE_RMS)
        ttt_rms_postnorm(o->data, o->data, n, L->d_v, TTT_POSTNORM_EPS);
    ttt_arena_release(ctx->arena, mark);
    return TTT_OK;
}
