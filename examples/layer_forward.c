/* libttt from C: build two classic layers from descriptors, run them on (B, T, H, D) buffers,
 * continue a sequence from its carried state, differentiate, and list the optimizers.
 *
 * Uses only the public header. Exits with status 1 when the output of a sequence split in two
 * (the second call starting from the first's final state) differs from one call over the whole
 * sequence, so ctest runs it as a test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ttt/ttt.h>

enum { B = 2, T = 48, T1 = 20, H = 3, D = 16 };

/* A small deterministic generator (xorshift), so the example needs nothing else. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float uniform(void) { /* in (-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static float *random_buffer(size_t n, float lo, float hi) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * 0.5f * (uniform() + 1.0f);
    return x;
}

/* Rows of the time range [t0, t0 + n) of a (B, T, H, w) buffer as a (B, n, H, w) buffer. */
static float *slice_time(const float *x, int t0, int n, int w) {
    const size_t row = (size_t)H * w;
    float *y = malloc((size_t)B * n * row * sizeof(float));
    for (int b = 0; b < B; b++)
        memcpy(y + (size_t)b * n * row, x + ((size_t)b * T + t0) * row, n * row * sizeof(float));
    return y;
}

static int fail(const char *what, const ttt_error *err) {
    fprintf(stderr, "%s: %s\n", what, ttt_errmsg(err));
    return 1;
}

/* Run one layer; returns 0 when the split run matches the whole one. */
static int demo(const char *preset, const char *form) {
    ttt_error err;
    ttt_layer_descriptor desc;
    ttt_layer_descriptor_init(&desc, sizeof desc);
    desc.preset = preset;
    desc.scale = 1.0 / sqrt((double)D); /* the usual attention scaling of the queries */
    desc.form = form;                    /* NULL: the preset's default (auto) */
    ttt_layer_handle *layer = NULL;
    if (ttt_layer_new(&layer, &desc, D, D, &err) != TTT_OK) return fail(preset, &err);
    printf("\n%s\n", ttt_layer_tuple(layer));

    /* The state: its tensors and their shapes (one sequence's; the buffers are (B, H, …)). */
    const int n_state = ttt_layer_state_tensors(layer);
    float *state_full[8] = {0}, *state_mid[8] = {0}, *state_end[8] = {0};
    size_t state_n[8];
    if (n_state > 8) return fail(preset, &err);
    for (int i = 0; i < n_state; i++) {
        const char *name;
        int shape[4];
        const int nd = ttt_layer_state_shape(&name, shape, layer, i);
        state_n[i] = (size_t)B * H;
        printf("  state %d: %s (B, H", i, name);
        for (int j = 0; j < nd; j++) {
            printf(", %d", shape[j]);
            state_n[i] *= (size_t)shape[j];
        }
        printf(")\n");
        state_full[i] = malloc(state_n[i] * sizeof(float));
        state_mid[i] = malloc(state_n[i] * sizeof(float));
        state_end[i] = malloc(state_n[i] * sizeof(float));
    }

    /* Inputs: unit-norm keys (the delta rule is stable for them), learning rates in (0, 1),
     * scalar gates log α in (-0.1, 0). */
    const size_t n_qk = (size_t)B * T * H * D, n_tok = (size_t)B * T * H;
    float *q = random_buffer(n_qk, -1, 1), *k = random_buffer(n_qk, -1, 1);
    float *v = random_buffer(n_qk, -1, 1), *eta = random_buffer(n_tok, 0.1f, 0.9f);
    float *la = random_buffer(n_tok, -0.1f, 0.0f);
    for (size_t r = 0; r < n_tok; r++) {
        double s = 0;
        for (int j = 0; j < D; j++) s += (double)k[r * D + j] * k[r * D + j];
        for (int j = 0; j < D; j++) k[r * D + j] /= (float)sqrt(s);
    }

    /* One call over the whole sequence. */
    float *o = malloc(n_qk * sizeof(float));
    ttt_batch_io io = {.size = sizeof io,
                       .B = B, .T = T, .H = H, .o = o, .q = q, .k = k, .v = v, .eta = eta,
                       .log_alpha = la, .state_out = state_full};
    if (ttt_layer_forward_run(layer, &io, 0, &err) != TTT_OK) return fail(preset, &err);

    /* The same sequence in two calls: [0, T1) then [T1, T) from the carried state. */
    float *outs[2];
    const int t0[2] = {0, T1}, tn[2] = {T1, T - T1};
    for (int part = 0; part < 2; part++) {
        float *qs = slice_time(q, t0[part], tn[part], D);
        float *ks = slice_time(k, t0[part], tn[part], D);
        float *vs = slice_time(v, t0[part], tn[part], D);
        float *es = slice_time(eta, t0[part], tn[part], 1);
        float *ls = slice_time(la, t0[part], tn[part], 1);
        outs[part] = malloc((size_t)B * tn[part] * H * D * sizeof(float));
        ttt_batch_io io2 = {.size = sizeof io2,
                            .B = B, .T = tn[part], .H = H, .o = outs[part], .q = qs, .k = ks,
                            .v = vs, .eta = es, .log_alpha = ls,
                            .state_in = part ? (const float *const *)state_mid : NULL,
                            .state_out = part ? state_end : state_mid};
        ttt_status s = ttt_layer_forward_run(layer, &io2, 0, &err);
        free(qs), free(ks), free(vs), free(es), free(ls);
        if (s != TTT_OK) return fail(preset, &err);
    }
    /* Compare: the chunk boundaries fall elsewhere in the split run, so the float32 sums are
     * ordered differently; 1e-4 of the output's scale is far above that rounding (~1e-6) and
     * far below any real difference (a lost state is O(1)). */
    double max_o = 0, max_diff = 0;
    for (int part = 0; part < 2; part++) {
        float *whole = slice_time(o, t0[part], tn[part], D);
        for (size_t i = 0; i < (size_t)B * tn[part] * H * D; i++) {
            max_o = fmax(max_o, fabs(whole[i]));
            max_diff = fmax(max_diff, fabs(whole[i] - outs[part][i]));
        }
        free(whole);
    }
    for (int i = 0; i < n_state; i++)
        for (size_t j = 0; j < state_n[i]; j++)
            max_diff = fmax(max_diff, fabs(state_full[i][j] - state_end[i][j]));
    const int ok = max_diff <= 1e-4 * fmax(max_o, 1.0);
    printf("  split at t = %d: max |difference| %.3g (outputs up to %.3g): %s\n", T1, max_diff,
           max_o, ok ? "same" : "DIFFERENT");

    /* Gradients of Σ d_o ⊙ o with respect to the inputs. */
    float *d_o = random_buffer(n_qk, -1, 1);
    float *d_q = malloc(n_qk * sizeof(float)), *d_k = malloc(n_qk * sizeof(float));
    float *d_v = malloc(n_qk * sizeof(float)), *d_eta = malloc(n_tok * sizeof(float));
    ttt_batch_grad g = {.size = sizeof g,
                        .d_o = d_o, .d_q = d_q, .d_k = d_k, .d_v = d_v, .d_eta = d_eta};
    if (ttt_layer_backward_run(layer, &io, &g, &err) != TTT_OK) return fail(preset, &err);
    double nq = 0, ne = 0;
    for (size_t i = 0; i < n_qk; i++) nq += (double)d_q[i] * d_q[i];
    for (size_t i = 0; i < n_tok; i++) ne += (double)d_eta[i] * d_eta[i];
    printf("  backward: |dL/dq| = %.4g, |dL/deta| = %.4g\n", sqrt(nq), sqrt(ne));
    const int finite = isfinite(nq) && isfinite(ne) && nq > 0;

    free(q), free(k), free(v), free(eta), free(la), free(o), free(outs[0]), free(outs[1]);
    free(d_o), free(d_q), free(d_k), free(d_v), free(d_eta);
    for (int i = 0; i < n_state; i++) free(state_full[i]), free(state_mid[i]), free(state_end[i]);
    ttt_layer_free(layer);
    return ok && finite ? 0 : 1;
}

int main(void) {
    printf("libttt %s\n\noptimizers:\n", ttt_version());
    for (int i = 0; i < ttt_registry_count(TTT_REGISTRY_OPTIMIZERS); i++) {
        const char *name, *help;
        ttt_registry_entry(&name, &help, TTT_REGISTRY_OPTIMIZERS, i, NULL);
        printf("  %-12s %s\n", name, help);
    }
    int bad = demo("gated_deltanet", "chunkwise"); /* chunks of 16: the split at 20 is inside one */
    bad |= demo("deltanet", NULL);
    return bad ? 1 : 0;
}
