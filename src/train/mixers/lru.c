/* The Linear Recurrent Unit (model.mixer: lru; Orvieto et al. 2023, docs/math.md §8.1):
 *     u_t = h_t W_B (Re | Im),  s_t = λ ⊙ s_{t−1} + γ ⊙ u_t,  λ = exp(−exp ν + i exp θ),
 *     γ = sqrt(1 − |λ|²),  y_t = Re(C s_t) + D ⊙ h_t,  o_t = GELU(y_t)     (B·T, H·D)
 * with n complex states (lru_state; 0 = d_model) initialized on the ring
 * |λ| ∈ [lru_r_min, lru_r_max], phase ∈ [0, lru_max_phase]. The block's W_o is the linear map
 * after the GELU (the paper follows it with a GLU; no output norm or gate by default). The skip
 * D ⊙ h needs H·D = d_model. Kernels and backward: layers/diagonal/. */
#include "mixer.h"

#include <math.h>
#include <string.h>

#include "diagonal.h"
#include "ops.h"

enum { W_B, NU, THETA, W_C, D_SKIP, N_OWN }; /* ids->own */
enum { STATE, R_MIN, R_MAX, PHASE };          /* cfg->own */
_Static_assert(N_OWN <= TTT_MIXER_MAX_IDS, "the lru mixer's ids fit in ttt_block_ids.own");

static const ttt_option options[] = {
    {"lru_state", TTT_OPT_INT, "0", 0, 65536, NULL,
     "lru mixer: complex states n; 0 = d_model"},
    {"lru_r_min", TTT_OPT_FLOAT, "0.4", 0.0, 0.9999, NULL,
     "lru mixer: least |lambda| of the ring initialization"},
    {"lru_r_max", TTT_OPT_FLOAT, "0.99", 0.0, 0.9999, NULL,
     "lru mixer: largest |lambda| of the ring initialization (< 1)"},
    {"lru_max_phase", TTT_OPT_FLOAT, "6.283185", 1e-6, 6.283185, NULL,
     "lru mixer: phases drawn uniform in [0, lru_max_phase]"},
    TTT_OPTION_END,
};

static ttt_status parse(ttt_seq_model_config *c, const ttt_cfg_node *map,
                        const ttt_cfg_node *layer_map, ttt_cfg_node **layer_resolved,
                        ttt_error *err) {
    (void)layer_map;
    (void)layer_resolved;
    const int n = (int)ttt_cfg_int(map, "lru_state");
    c->own[STATE] = n > 0 ? n : c->d_model;
    c->own[R_MIN] = ttt_cfg_float(map, "lru_r_min");
    c->own[R_MAX] = ttt_cfg_float(map, "lru_r_max");
    c->own[PHASE] = ttt_cfg_float(map, "lru_max_phase");
    if (c->own[R_MAX] < c->own[R_MIN])
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "lru_r_max"),
                             "model.lru_r_max = %g is below lru_r_min = %g", c->own[R_MAX],
                             c->own[R_MIN]);
    if (c->n_heads * c->head_dim != c->d_model)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "head_dim"),
                             "model.head_dim: the lru mixer's skip D ⊙ x needs heads x head_dim "
                             "= d_model (%d x %d != %d)",
                             c->n_heads, c->head_dim, c->d_model);
    if (c->positions == TTT_POS_ROPE)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "positions"),
                             "model.positions: rope applies to softmax attention; the LRU's "
                             "recurrence knows positions (use auto or none)");
    if (ttt_mixer_tri(map, "eta") > 0 || strcmp(ttt_cfg_str(map, "eta"), "dt") == 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "eta"),
                             "model.eta: the LRU has no inner learning rate");
    /* no q/k/v projections: their convolution and activation do not apply (resolved off) */
    if (c->conv < 0) c->conv = 0;
    if (c->act < 0) c->act = 0;
    c->qk_norm = 0;
    c->eta = TTT_ETA_NONE;
    c->gate = TTT_GATE_NONE;
    c->learn_init = 0;
    c->out_norm = ttt_mixer_tri(map, "out_norm") > 0; /* auto: off */
    c->out_gate = ttt_mixer_tri(map, "out_gate") > 0; /* auto: off */
    return TTT_OK;
}

static void add_params(ttt_mixer_builder *b, const ttt_seq_model_config *c, int l,
                       ttt_block_ids *k) {
    const int d = c->d_model, n = (int)c->own[STATE], C = c->n_heads * c->head_dim;
    /* the paper's scales: B ~ N(0, 1/(2d)) per real and imaginary part, C ~ N(0, 1/n) */
    k->own[W_B] = ttt_mixer_add(b, "w_b", 2, (int[]){d, 2 * n}, 1, TTT_INIT_NORMAL,
                                1.0f / sqrtf(2.0f * d));
    k->own[NU] = ttt_mixer_add(b, "nu_log", 1, (int[]){n}, 0, TTT_INIT_ZEROS, 0);
    k->own[THETA] = ttt_mixer_add(b, "theta_log", 1, (int[]){n}, 0, TTT_INIT_ZEROS, 0);
    if (!ttt_mixer_failed(b)) {
        ttt_rng r = ttt_mixer_rng(b, 0x6c7275u + (uint64_t)l); /* "lru" */
        ttt_lru_init_ring(ttt_mixer_param(b, k->own[NU])->data,
                          ttt_mixer_param(b, k->own[THETA])->data, n, (float)c->own[R_MIN],
                          (float)c->own[R_MAX], (float)c->own[PHASE], &r);
    }
    k->own[W_C] = ttt_mixer_add(b, "w_c", 2, (int[]){2 * n, C}, 1, TTT_INIT_NORMAL,
                                1.0f / sqrtf((float)n));
    k->own[D_SKIP] = ttt_mixer_add(b, "d", 1, (int[]){d}, 0, TTT_INIT_NORMAL, 1.0f);
}

static double param_bound(const ttt_seq_model_config *c) {
    const double d = c->d_model, n = c->own[STATE], C = (double)c->n_heads * c->head_dim;
    return d * 2 * n + 2 * n + 2 * n * C + d;
}

static ttt_status forward(const ttt_mixer_call *call, ttt_tensor **out, ttt_error *err) {
    (void)err;
    const int *own = call->ids->own;
    const ttt_lru_weights w = {ttt_mixer_p(call, own[W_B]), ttt_mixer_p(call, own[NU]),
                               ttt_mixer_p(call, own[THETA]), ttt_mixer_p(call, own[W_C]),
                               ttt_mixer_p(call, own[D_SKIP])};
    *out = ttt_gelu(call->ctx, ttt_lru_block(call->ctx, &w, call->h, call->B, call->T, 1));
    return TTT_OK;
}

/* Every step of the block has a device implementation (docs/device_ops.md): the projections,
 * the recurrence ("Recurrences" there, one per sequence), the skip and the GELU. */
static const char *device_refuse(const ttt_seq_model_config *c, char *buf, size_t len) {
    (void)c, (void)buf, (void)len;
    return NULL;
}

const ttt_mixer ttt_mixer_lru = {
    .name = "lru",
    .help = "Linear Recurrent Unit: complex diagonal s_t = lambda s_{t-1} + gamma B x_t, "
            "y = Re(C s) + D x, GELU (docs/math.md §8.1)",
    .positions = TTT_POS_NONE,
    .options = options,
    .parse = parse,
    .add_params = add_params,
    .param_bound = param_bound,
    .forward = forward,
    .device_refuse = device_refuse,
};
