/* The batched forward on caller buffers (layer.h, ttt_layer_forward_batch): each (batch, head)
 * sequence of the (B, T, H, D) layout is gathered into (T, D) tensors, run by ttt_layer_forward
 * from its initial state, and scattered back with its final state. A plain reference
 * implementation: one sequence after another, copies in and out. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"

static int n_opt_state(const ttt_layer *L) {
    return L->optim->n_state ? L->optim->n_state(L->optim_cfg) : 0;
}

int ttt_layer_state_count(const ttt_layer *L) {
    const int n_w = L->model->n_weights;
    return n_w + n_w * n_opt_state(L) + (L->normalize == TTT_NORMALIZE_RATIO);
}

/* Names of the state tensors: "W0"…, "W0.opt0"…, "z". */
#define W_NAMES(w) "W" #w
#define OPT_NAMES(w) {"W" #w ".opt0", "W" #w ".opt1", "W" #w ".opt2", "W" #w ".opt3"}
static const char *const weight_names[TTT_MAX_WEIGHTS] = {
    W_NAMES(0), W_NAMES(1), W_NAMES(2), W_NAMES(3), W_NAMES(4), W_NAMES(5), W_NAMES(6), W_NAMES(7)};
static const char *const opt_names[TTT_MAX_WEIGHTS][TTT_MAX_OPT_STATE] = {
    OPT_NAMES(0), OPT_NAMES(1), OPT_NAMES(2), OPT_NAMES(3),
    OPT_NAMES(4), OPT_NAMES(5), OPT_NAMES(6), OPT_NAMES(7)};

int ttt_layer_state_info(const ttt_layer *L, int i, const char **name, int shape[TTT_MAX_DIMS]) {
    const int n_w = L->model->n_weights, n_opt = n_opt_state(L);
    if (i < 0 || i >= ttt_layer_state_count(L)) return -1;
    if (i >= n_w + n_w * n_opt) { /* z (d_k, 1) */
        if (name) *name = "z";
        shape[0] = L->d_k;
        shape[1] = 1;
        return 2;
    }
    const int w = i < n_w ? i : (i - n_w) / n_opt; /* an optimizer state has its weight's shape */
    if (name) *name = i < n_w ? weight_names[w] : opt_names[w][(i - n_w) % n_opt];
    return L->model->shape(w, L->d_k, L->d_v, shape);
}

/* State tensor i of a sequence's state, in the order of ttt_layer_state_info. */
static ttt_tensor **state_slot(ttt_layer_state *st, int i) {
    if (i < st->n_w) return &st->W[i];
    i -= st->n_w;
    if (i < st->n_w * st->n_opt) return &st->opt[i / st->n_opt][i % st->n_opt];
    return &st->z;
}

ttt_status ttt_layer_forward_batch(const ttt_layer *L, const ttt_layer_io *io, int threads,
                                   ttt_error *err) {
    (void)threads; /* one sequence after another */
    const int B = io->B, T = io->T, H = io->H, d_k = L->d_k, d_v = L->d_v;
    if (B < 0 || T < 0 || H < 0 || !io->o || !io->q || !io->k || !io->v)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "forward_batch: B, T, H must be >= 0 and o, q, k, v given");
    const int gk = io->alpha_vec ? d_k : 1;
    const int n_state = ttt_layer_state_count(L);
    ttt_arena arena;
    ttt_arena_init(&arena, 1 << 20);
    ttt_ctx ctx = {.arena = &arena, .grad = 0};
    ttt_rng base;
    ttt_rng_seed(&base, io->seed);
    ttt_status s = TTT_OK;
    for (int b = 0; b < B && s == TTT_OK; b++)
        for (int h = 0; h < H && s == TTT_OK; h++) {
            const size_t bh = (size_t)b * H + h;
            ttt_tensor *q = ttt_tensor_2d(&ctx, T, d_k), *k = ttt_tensor_2d(&ctx, T, d_k);
            ttt_tensor *v = ttt_tensor_2d(&ctx, T, d_v), *o = ttt_tensor_2d(&ctx, T, d_v);
            ttt_tensor *eta = io->eta ? ttt_tensor_1d(&ctx, T) : NULL;
            ttt_tensor *la = !io->log_alpha ? NULL
                             : io->alpha_vec ? ttt_tensor_2d(&ctx, T, d_k)
                                             : ttt_tensor_1d(&ctx, T);
            for (int t = 0; t < T; t++) {
                const size_t row = (size_t)b * T * H + (size_t)t * H + h; /* (b, t, h) */
                memcpy(q->data + (size_t)t * d_k, io->q + row * d_k, d_k * sizeof(float));
                memcpy(k->data + (size_t)t * d_k, io->k + row * d_k, d_k * sizeof(float));
                memcpy(v->data + (size_t)t * d_v, io->v + row * d_v, d_v * sizeof(float));
                if (eta) eta->data[t] = io->eta[row];
                if (la) memcpy(la->data + (size_t)t * gk, io->log_alpha + row * gk,
                               gk * sizeof(float));
            }
            ttt_rng rng = ttt_rng_fork(&base, (uint64_t)h);
            ttt_layer_state st;
            ttt_layer_state_init(&ctx, L, &st, &rng);
            int w_given = 0;
            for (int i = 0; io->state_in && i < n_state; i++) {
                ttt_tensor *x = *state_slot(&st, i);
                if (!io->state_in[i]) continue;
                memcpy(x->data, io->state_in[i] + bh * x->n, x->n * sizeof(float));
                w_given |= i < st.n_w;
            }
            /* optimizer state not given starts from the given weights (e.g. LaCT's norms) */
            for (int w = 0; w < st.n_w && w_given; w++) {
                ttt_tensor *given[TTT_MAX_OPT_STATE];
                memcpy(given, st.opt[w], sizeof given);
                ttt_optim_reinit_state(&ctx, L->optim, L->optim_cfg, st.opt[w], st.n_opt,
                                       st.W[w]);
                for (int j = 0; j < st.n_opt; j++)
                    if (io->state_in[st.n_w + w * st.n_opt + j]) st.opt[w][j] = given[j];
            }
            if (T > 0) {
                s = ttt_layer_forward(&ctx, L, o, &st, q, k, v, eta, la, err);
                if (s != TTT_OK) {
                    ttt_error_prefix(err, "batch %d, head %d", b, h);
                    break;
                }
            }
            for (int t = 0; t < T; t++) {
                const size_t row = (size_t)b * T * H + (size_t)t * H + h;
                memcpy(io->o + row * d_v, o->data + (size_t)t * d_v, d_v * sizeof(float));
            }
            for (int i = 0; io->state_out && i < n_state; i++) {
                const ttt_tensor *x = *state_slot(&st, i);
                if (io->state_out[i])
                    memcpy(io->state_out[i] + bh * x->n, x->data, x->n * sizeof(float));
            }
            ttt_arena_reset(&arena);
        }
    ttt_arena_free(&arena);
    return s;
}
