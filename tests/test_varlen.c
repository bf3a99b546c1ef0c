/* Packed variable-length batches through the public C API (include/ttt/ttt.h, docs/api.md
 * "Packed sequences"): B = 1, the T tokens hold n_seqs sequences back to back, io->cu_seqlens
 * their offsets.
 *
 * - For every preset and every form it builds with, and for each set of inputs (η, per-token
 *   and per-key gates, given initial states), the packed forward equals running each sequence
 *   as its own call, bit for bit: the output rows and every final state. The sequences include
 *   an empty one, one of a single token and ones longer than a chunk. The same packed inputs run
 *   as one sequence (no cu_seqlens) must differ after the first boundary, so the comparison
 *   sees whether the state is reset.
 * - The same for ttt_layer_backward_run: o, the final states and every gradient.
 * - Bad offsets and a CUDA call are refused with a message naming io->cu_seqlens and the
 *   index.
 * - `ttt apply` (ttt_apply_file) on a file whose cu_seqlens is I64 or I32 equals ttt_apply on
 *   each sequence alone, o and final state bit for bit; a float or bad cu_seqlens is refused. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apply.h" /* the library's internals first: ttt.h then reuses their ttt_status */

#include <ttt/ttt.h>

enum { H = 2, DK = 4, DV = 4, NSEQ = 5, T = 120, MAXS = 48 };
/* lengths 37, 0, 1, 71, 11: an empty sequence, a single token, one longer than the presets'
 * chunks (≤ 64) and a short one at the end */
static const int64_t CU[NSEQ + 1] = {0, 37, 37, 38, 109, 120};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(float lo, float hi) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((rng_state >> 40) / (double)(1ull << 24));
}
static float *rbuf(size_t n, float lo, float hi) {
    float *p = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = urand(lo, hi);
    return p;
}
static float *zbuf(size_t n) { return calloc(n + 1, sizeof(float)); }

/* The inputs of a packed call and the state tensors' sizes. */
typedef struct problem {
    ttt_layer_handle *h;
    int nh; /* key/value pairs per token (steps_per_token): k, v and η have nh rows per token */
    int nq; /* query columns per token: DK, or levels·DK for log-linear attention (levels) */
    int n_state;
    size_t numel[MAXS]; /* one (sequence, head)'s elements of state tensor i */
    int weight[MAXS];   /* tensor i is a fast weight (its initial value is given) */
    float *q, *k, *v, *eta, *la, *la_vec;
    float *state_in[MAXS];
    float *d_o, *d_state_out[MAXS];
} problem;

static void problem_init(problem *p, ttt_layer_handle *h) {
    memset(p, 0, sizeof *p);
    p->h = h;
    const char *nh = strstr(ttt_layer_tuple(h), "steps_per_token ");
    p->nh = nh ? atoi(nh + strlen("steps_per_token ")) : 1;
    ck_assert_int_ge(p->nh, 1);
    const char *nl = strstr(ttt_layer_tuple(h), "levels ");
    p->nq = (nl ? atoi(nl + strlen("levels ")) : 1) * DK;
    p->n_state = ttt_layer_state_tensors(h);
    ck_assert_int_le(p->n_state, MAXS);
    for (int i = 0; i < p->n_state; i++) {
        const char *name;
        int shape[4];
        const int nd = ttt_layer_state_shape(&name, shape, h, i);
        p->numel[i] = 1;
        for (int d = 0; d < nd; d++) p->numel[i] *= (size_t)shape[d];
        p->weight[i] = name[0] == 'W' && !strstr(name, "opt");
        /* initial weights of O(0.5): a state that matters for the outputs */
        p->state_in[i] = rbuf(NSEQ * H * p->numel[i], -0.5f, 0.5f);
        p->d_state_out[i] = rbuf(NSEQ * H * p->numel[i], -1, 1);
    }
    p->q = rbuf((size_t)T * H * p->nq, -1, 1);
    p->k = rbuf((size_t)p->nh * T * H * DK, -1, 1);
    p->v = rbuf((size_t)p->nh * T * H * DV, -1, 1);
    p->eta = rbuf((size_t)p->nh * T * H, 0.1f, 0.9f);
    p->la = rbuf((size_t)T * H, -0.3f, 0.0f);
    p->la_vec = rbuf((size_t)T * H * DK, -0.3f, 0.0f);
    p->d_o = rbuf((size_t)T * H * DV, -1, 1);
    for (size_t r = 0; r < (size_t)p->nh * T * H; r++) { /* unit keys: the delta rules contract */
        double n = 0;
        for (int j = 0; j < DK; j++) n += (double)p->k[r * DK + j] * p->k[r * DK + j];
        for (int j = 0; j < DK; j++) p->k[r * DK + j] /= (float)sqrt(n);
    }
}

static void problem_free(problem *p) {
    for (int i = 0; i < p->n_state; i++) free(p->state_in[i]), free(p->d_state_out[i]);
    free(p->q), free(p->k), free(p->v), free(p->eta), free(p->la), free(p->la_vec), free(p->d_o);
}

/* What a call writes: o, the final states and, for a backward, the gradients. */
typedef struct outs {
    float *o, *state_out[MAXS];
    float *d_q, *d_k, *d_v, *d_eta, *d_la, *d_state_in[MAXS];
} outs;

static void outs_init(outs *r, const problem *p) {
    memset(r, 0, sizeof *r);
    r->o = zbuf((size_t)T * H * DV);
    r->d_q = zbuf((size_t)T * H * p->nq);
    r->d_k = zbuf((size_t)p->nh * T * H * DK);
    r->d_v = zbuf((size_t)p->nh * T * H * DV);
    r->d_eta = zbuf((size_t)p->nh * T * H);
    r->d_la = zbuf((size_t)T * H * DK);
    for (int i = 0; i < p->n_state; i++) {
        r->state_out[i] = zbuf(NSEQ * H * p->numel[i]);
        r->d_state_in[i] = zbuf(NSEQ * H * p->numel[i]);
    }
}

static void outs_free(outs *r, const problem *p) {
    free(r->o), free(r->d_q), free(r->d_k), free(r->d_v), free(r->d_eta), free(r->d_la);
    for (int i = 0; i < p->n_state; i++) free(r->state_out[i]), free(r->d_state_in[i]);
}

/* Inputs: bit 1 η, bit 2 gates per token, bit 4 gates per key dimension, bit 8 the initial
 * weights given (else the layer's own initial state). */
enum { V_ETA = 1, V_GATE = 2, V_GATE_VEC = 4, V_STATE = 8, N_VARIANTS = 16 };

/* One call on tokens [t0, t0 + len) of p and sequences [s0, s0 + ns) of its states, written
 * into r at the same places. cu = NULL: one sequence, B = 1, T = len, on copies of the rows (so
 * that the packed call and the sequences' own calls share no buffer). */
static ttt_status call(const problem *p, int variant, int backward, int t0, int len, int s0,
                       const int64_t *cu, int ns, int threads, outs *r, ttt_error *err) {
    const size_t rows = (size_t)len * H, r0 = (size_t)t0 * H;
    /* k, v, η: nh rows per token */
    const size_t pr = (size_t)p->nh * rows, p0 = (size_t)p->nh * r0;
    const int gk = variant & V_GATE_VEC ? DK : 1;
    float *q = zbuf(rows * p->nq), *k = zbuf(pr * DK), *v = zbuf(pr * DV), *eta = zbuf(pr),
          *la = zbuf(rows * gk), *o = zbuf(rows * DV), *d_o = zbuf(rows * DV);
    float *d_q = zbuf(rows * p->nq), *d_k = zbuf(pr * DK), *d_v = zbuf(pr * DV),
          *d_eta = zbuf(pr), *d_la = zbuf(rows * gk);
    memcpy(q, p->q + r0 * p->nq, rows * p->nq * sizeof(float));
    memcpy(k, p->k + p0 * DK, pr * DK * sizeof(float));
    memcpy(v, p->v + p0 * DV, pr * DV * sizeof(float));
    memcpy(eta, p->eta + p0, pr * sizeof(float));
    memcpy(la, (gk > 1 ? p->la_vec : p->la) + r0 * gk, rows * gk * sizeof(float));
    memcpy(d_o, p->d_o + r0 * DV, rows * DV * sizeof(float));
    const float *sin[MAXS] = {0}, *dso[MAXS] = {0};
    float *sout[MAXS] = {0}, *dsi[MAXS] = {0};
    for (int i = 0; i < p->n_state; i++) {
        const size_t blk = (size_t)s0 * H * p->numel[i];
        sin[i] = variant & V_STATE && p->weight[i] ? p->state_in[i] + blk : NULL;
        dso[i] = p->d_state_out[i] + blk;
        sout[i] = r->state_out[i] + blk;
        dsi[i] = r->d_state_in[i] + blk;
    }
    (void)ns;
    ttt_batch_io io = {.size = sizeof io, .B = 1, .T = len, .H = H, .o = o, .q = q, .k = k, .v = v,
                       .eta = variant & V_ETA ? eta : NULL,
                       .log_alpha = variant & (V_GATE | V_GATE_VEC) ? la : NULL,
                       .alpha_vec = (variant & V_GATE_VEC) != 0, .state_in = sin,
                       .state_out = sout, .seed = 7, .cu_seqlens = cu, .n_seqs = cu ? ns : 0};
    const ttt_batch_grad g = {.size = sizeof g,
                              .d_o = d_o, .d_state_out = dso, .d_q = d_q, .d_k = d_k,
                              .d_v = d_v, .d_eta = io.eta ? d_eta : NULL,
                              .d_log_alpha = io.log_alpha ? d_la : NULL, .d_state_in = dsi};
    ttt_status s = backward ? ttt_layer_backward_run(p->h, &io, &g, err)
                            : ttt_layer_forward_run(p->h, &io, threads, err);
    memcpy(r->o + r0 * DV, o, rows * DV * sizeof(float));
    memcpy(r->d_q + r0 * p->nq, d_q, rows * p->nq * sizeof(float));
    memcpy(r->d_k + p0 * DK, d_k, pr * DK * sizeof(float));
    memcpy(r->d_v + p0 * DV, d_v, pr * DV * sizeof(float));
    memcpy(r->d_eta + p0, d_eta, pr * sizeof(float));
    memcpy(r->d_la + r0 * gk, d_la, rows * gk * sizeof(float));
    free(q), free(k), free(v), free(eta), free(la), free(o), free(d_o);
    free(d_q), free(d_k), free(d_v), free(d_eta), free(d_la);
    return s;
}

/* The first buffer where a and b differ (by bits), or NULL. */
static const char *outs_differ(const outs *a, const outs *b, const problem *p) {
    static char what[32];
    if (memcmp(a->o, b->o, (size_t)T * H * DV * sizeof(float))) return "o";
    if (memcmp(a->d_q, b->d_q, (size_t)T * H * p->nq * sizeof(float))) return "d_q";
    if (memcmp(a->d_k, b->d_k, (size_t)p->nh * T * H * DK * sizeof(float))) return "d_k";
    if (memcmp(a->d_v, b->d_v, (size_t)p->nh * T * H * DV * sizeof(float))) return "d_v";
    if (memcmp(a->d_eta, b->d_eta, (size_t)p->nh * T * H * sizeof(float))) return "d_eta";
    if (memcmp(a->d_la, b->d_la, (size_t)T * H * DK * sizeof(float))) return "d_log_alpha";
    for (int i = 0; i < p->n_state; i++) {
        const size_t n = NSEQ * H * p->numel[i] * sizeof(float);
        snprintf(what, sizeof what, "state_out[%d]", i);
        if (memcmp(a->state_out[i], b->state_out[i], n)) return what;
        snprintf(what, sizeof what, "d_state_in[%d]", i);
        if (memcmp(a->d_state_in[i], b->d_state_in[i], n)) return what;
    }
    return NULL;
}

/* Packed against one call per sequence, for one layer and one set of inputs. Returns 1 when
 * both ran (and agreed), 2 when moreover (forward) the same tokens run as one sequence give
 * another output after the first boundary, 0 when the layer does not take these inputs (then
 * the packed call fails with the same status as the sequences' own calls). */
static int compare(const problem *p, int variant, int backward, const char *label) {
    outs packed, apart;
    outs_init(&packed, p);
    outs_init(&apart, p);
    ttt_error err;
    ttt_status s_apart = TTT_OK;
    for (int n = 0; n < NSEQ && s_apart == TTT_OK; n++)
        s_apart = call(p, variant, backward, (int)CU[n], (int)(CU[n + 1] - CU[n]), n, NULL, 0,
                       1, &apart, &err);
    char why[512];
    snprintf(why, sizeof why, "%s", ttt_errmsg(&err));
    const ttt_status s_packed = call(p, variant, backward, 0, T, 0, CU, NSEQ, 0, &packed, &err);
    ck_assert_msg(s_packed == s_apart, "%s, inputs %d: packed call status %d (%s), one call per "
                  "sequence %d (%s)", label, variant, (int)s_packed, ttt_errmsg(&err),
                  (int)s_apart, why);
    int ran = 0;
    if (s_packed == TTT_OK) {
        ran = 1;
        const char *d = outs_differ(&packed, &apart, p);
        ck_assert_msg(!d, "%s, inputs %d, %s: packed and one call per sequence differ in %s",
                      label, variant, backward ? "backward" : "forward", d);
        /* the same tokens as one sequence: the rows after the first boundary must differ, else
         * this comparison could not see a missing reset */
        if (!backward) {
            outs whole;
            outs_init(&whole, p);
            ck_assert_msg(call(p, variant, 0, 0, T, 0, NULL, 0, 0, &whole, &err) == TTT_OK,
                          "%s", ttt_errmsg(&err));
            if (memcmp(whole.o + (size_t)CU[1] * H * DV, packed.o + (size_t)CU[1] * H * DV,
                       (size_t)(T - CU[1]) * H * DV * sizeof(float)) != 0)
                ran = 2;
            outs_free(&whole, p);
        }
    }
    outs_free(&packed, p);
    outs_free(&apart, p);
    return ran;
}

/* Every preset with every distinct form name of the registry (and auto). */
static void every_layer(int backward, int variant_step) {
    const int n_forms = ttt_registry_count(TTT_REGISTRY_FORMS);
    const char *forms[64];
    int nf = 0;
    forms[nf++] = "auto";
    for (int i = 0; i < n_forms && nf < 64; i++) {
        const char *name;
        ttt_error err;
        ck_assert(ttt_registry_entry(&name, NULL, TTT_REGISTRY_FORMS, i, &err) == TTT_OK);
        int seen = 0;
        for (int j = 0; j < nf; j++) seen |= strcmp(forms[j], name) == 0;
        if (!seen) forms[nf++] = name;
    }
    int presets_ran = 0, runs = 0;
    const int n_presets = ttt_registry_count(TTT_REGISTRY_PRESETS);
    for (int pi = 0; pi < n_presets; pi++) {
        const char *preset;
        ttt_error err;
        ck_assert(ttt_registry_entry(&preset, NULL, TTT_REGISTRY_PRESETS, pi, &err) == TTT_OK);
        int preset_ran = 0;
        for (int f = 0; f < nf; f++) {
            ttt_layer_descriptor d;
            ttt_layer_descriptor_init(&d, sizeof d);
            d.preset = preset;
            d.form = forms[f];
            ttt_layer_handle *h = NULL;
            if (ttt_layer_new(&h, &d, DK, DV, &err) != TTT_OK) {
                /* a form this preset has no entry for; auto always builds */
                ck_assert_msg(f > 0, "preset %s: %s", preset, ttt_errmsg(&err));
                continue;
            }
            problem p;
            problem_init(&p, h);
            char label[160];
            snprintf(label, sizeof label, "preset %s, form %s", preset, forms[f]);
            int ran = 0, reset_seen = 0;
            for (int v = 0; v < N_VARIANTS; v += variant_step) {
                if ((v & V_GATE) && (v & V_GATE_VEC)) continue;
                const int r = compare(&p, v, backward, label);
                ran += r > 0;
                reset_seen |= r == 2;
            }
            /* a layer whose state does not change within the first sequence (LaCT: its first
             * update comes after 2048 tokens) gives the unreset output from its own initial
             * state; with given initial states, different per sequence, it may not */
            ck_assert_msg(!ran || backward || reset_seen,
                          "%s: the packed output equals the unreset one for every input", label);
            preset_ran |= ran > 0;
            runs += ran;
            problem_free(&p);
            ttt_layer_free(h);
        }
        ck_assert_msg(preset_ran, "preset %s: no form and inputs ran", preset);
        presets_ran++;
    }
    ck_assert_int_eq(presets_ran, n_presets);
    fprintf(stderr, "%s: %d presets, %d (preset, form, inputs) runs bit-identical\n",
            backward ? "backward" : "forward", presets_ran, runs);
}

START_TEST(forward_equals_one_call_per_sequence) { every_layer(0, 1); }
END_TEST

START_TEST(backward_equals_one_call_per_sequence) { every_layer(1, 1); }
END_TEST

/* The comparison sees one flipped bit: a query of the fourth sequence changed in the packed
 * inputs only changes that sequence's output. */
START_TEST(a_changed_input_is_seen) {
    ttt_layer_descriptor d;
    ttt_layer_descriptor_init(&d, sizeof d);
    d.preset = "gated_deltanet";
    ttt_layer_handle *h = NULL;
    ttt_error err;
    ck_assert_msg(ttt_layer_new(&h, &d, DK, DV, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    problem p;
    problem_init(&p, h);
    outs a, b;
    outs_init(&a, &p);
    outs_init(&b, &p);
    ck_assert(call(&p, V_ETA | V_GATE, 0, 0, T, 0, CU, NSEQ, 0, &a, &err) == TTT_OK);
    p.q[((size_t)CU[3] + 5) * H * DK] += 0.25f;
    ck_assert(call(&p, V_ETA | V_GATE, 0, 0, T, 0, CU, NSEQ, 0, &b, &err) == TTT_OK);
    ck_assert_str_eq(outs_differ(&a, &b, &p), "o");
    /* only rows of sequence 3 (tokens 38..108) moved */
    for (size_t t = 0; t < (size_t)T; t++) {
        const int same = !memcmp(a.o + t * H * DV, b.o + t * H * DV, H * DV * sizeof(float));
        if (t < (size_t)CU[3] + 5 || t >= (size_t)CU[4]) ck_assert_msg(same, "row %zu", t);
    }
    outs_free(&a, &p);
    outs_free(&b, &p);
    problem_free(&p);
    ttt_layer_free(h);
}
END_TEST

/* A packed call with offsets cu (n offsets after the first) must fail with `status` and a
 * message containing `want`. */
static void expect_refused(ttt_layer_handle *h, const int64_t *cu, int n_seqs, int B,
                           ttt_device_kind device, ttt_status status, const char *want) {
    float x[4 * T * H * DK] = {0};
    ttt_batch_io io = {.size = sizeof io, .B = B, .T = T, .H = H, .o = x, .q = x, .k = x, .v = x,
                       .cu_seqlens = cu, .n_seqs = n_seqs, .device = device};
    ttt_error err;
    ck_assert_int_eq(ttt_layer_forward_run(h, &io, 0, &err), status);
    ck_assert_msg(strstr(ttt_errmsg(&err), want), "'%s' lacks '%s'", ttt_errmsg(&err), want);
    float d_o[4 * T * H * DV] = {0};
    const ttt_batch_grad g = {.size = sizeof g, .d_o = d_o};
    ck_assert_int_eq(ttt_layer_backward_run(h, &io, &g, &err), status);
    ck_assert_msg(strstr(ttt_errmsg(&err), want), "'%s' lacks '%s'", ttt_errmsg(&err), want);
}

START_TEST(bad_offsets_are_named) {
    ttt_layer_descriptor d;
    ttt_layer_descriptor_init(&d, sizeof d);
    d.preset = "linear_attention";
    ttt_layer_handle *h = NULL;
    ttt_error err;
    ck_assert_msg(ttt_layer_new(&h, &d, DK, DV, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    const int64_t not_zero[] = {1, 60, T}, decreasing[] = {0, 60, 59, T},
                  past[] = {0, 60, T + 1, T}, short_last[] = {0, 60, T - 1},
                  good[] = {0, 60, T};
    expect_refused(h, not_zero, 2, 1, TTT_DEVICE_HOST, TTT_ERR_ARG,
                   "io->cu_seqlens[0] = 1; expected 0");
    expect_refused(h, decreasing, 3, 1, TTT_DEVICE_HOST, TTT_ERR_ARG,
                   "io->cu_seqlens[2] = 59 < io->cu_seqlens[1] = 60");
    expect_refused(h, past, 3, 1, TTT_DEVICE_HOST, TTT_ERR_ARG,
                   "io->cu_seqlens[2] = 121 is past T = 120");
    expect_refused(h, short_last, 2, 1, TTT_DEVICE_HOST, TTT_ERR_ARG,
                   "io->cu_seqlens[2] = 119 (the last offset); expected T = 120");
    expect_refused(h, good, 2, 2, TTT_DEVICE_HOST, TTT_ERR_SHAPE,
                   "layer call: io->cu_seqlens with B = 2");
    expect_refused(h, good, 0, 1, TTT_DEVICE_HOST, TTT_ERR_ARG,
                   "io->cu_seqlens with n_seqs = 0");
    expect_refused(h, NULL, 2, 1, TTT_DEVICE_HOST, TTT_ERR_ARG,
                   "io->n_seqs = 2 without io->cu_seqlens");
    /* a packed call keeps no forward (each sequence is a call of its own): io->kept with
     * cu_seqlens is refused before any buffer is read */
    {
        float y[T * H * DK] = {0}, oy[T * H * DV];
        static char kept[512];
        ttt_batch_io io = {.size = sizeof io, .B = 1, .T = T, .H = H, .o = oy, .q = y, .k = y,
                           .v = y, .cu_seqlens = good, .n_seqs = 2, .kept = kept,
                           .kept_bytes = sizeof kept};
        ck_assert_int_eq(ttt_layer_forward_run(h, &io, 0, &err), TTT_ERR_ARG);
        ck_assert_msg(strstr(ttt_errmsg(&err), "io->kept with io->cu_seqlens"), "%s",
                      ttt_errmsg(&err));
    }
    /* the same offsets are accepted on the host: the refusals above are the offsets' */
    float x[T * H * DK] = {0}, o[T * H * DV];
    ttt_batch_io io = {.size = sizeof io, .B = 1, .T = T, .H = H, .o = o, .q = x, .k = x, .v = x,
                       .cu_seqlens = good, .n_seqs = 2};
    ck_assert_msg(ttt_layer_forward_run(h, &io, 0, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    ttt_layer_free(h);
}
END_TEST


/* ---- ttt apply ---- */

/* A safetensors file written here (ttt_st_write writes F32 only): F32 tensors and one integer
 * tensor `cu_seqlens` of dtype `cu_dtype` ("I64", "I32" or "F32"). Little-endian host. */
typedef struct st_entry {
    const char *name;
    int ndim;
    int64_t shape[4];
    const float *data;
} st_entry;

static void write_st(const char *path, const st_entry *e, int n, const int64_t *cu, int n_cu,
                     const char *cu_dtype) {
    char hdr[4096];
    size_t w = 0, off = 0;
    w += (size_t)snprintf(hdr + w, sizeof hdr - w, "{");
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        char shp[96] = "";
        for (int d = 0; d < e[i].ndim; d++) {
            numel *= (size_t)e[i].shape[d];
            snprintf(shp + strlen(shp), sizeof shp - strlen(shp), "%s%lld", d ? "," : "",
                     (long long)e[i].shape[d]);
        }
        w += (size_t)snprintf(hdr + w, sizeof hdr - w,
                              "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%s],"
                              "\"data_offsets\":[%zu,%zu]}",
                              i ? "," : "", e[i].name, shp, off, off + 4 * numel);
        off += 4 * numel;
    }
    const size_t esz = strcmp(cu_dtype, "I64") == 0 ? 8 : 4;
    w += (size_t)snprintf(hdr + w, sizeof hdr - w,
                          ",\"cu_seqlens\":{\"dtype\":\"%s\",\"shape\":[%d],"
                          "\"data_offsets\":[%zu,%zu]}}",
                          cu_dtype, n_cu, off, off + esz * (size_t)n_cu);
    while (w % 8) hdr[w++] = ' ';
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    const uint64_t hl = w;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, w, f);
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) numel *= (size_t)e[i].shape[d];
        fwrite(e[i].data, 4, numel, f);
    }
    for (int i = 0; i < n_cu; i++) {
        if (esz == 8) fwrite(&cu[i], 8, 1, f);
        else if (strcmp(cu_dtype, "I32") == 0) {
            const int32_t x = (int32_t)cu[i];
            fwrite(&x, 4, 1, f);
        } else {
            const float x = (float)cu[i];
            fwrite(&x, 4, 1, f);
        }
    }
    fclose(f);
}

static ttt_cfg_node *layer_of(const char *yaml, ttt_cfg_node **root) {
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(yaml, "test.yaml", root, &err) == TTT_OK, "%s", err.msg);
    ttt_cfg_node *layer = (ttt_cfg_node *)ttt_cfg_get(*root, "layer");
    ck_assert_ptr_nonnull(layer);
    return layer;
}

START_TEST(apply_reads_cu_seqlens) {
    const char *yaml = "layer:\n  preset: gated_deltanet\n";
    float *q = rbuf((size_t)T * H * DK, -1, 1), *k = rbuf((size_t)T * H * DK, -0.5f, 0.5f);
    float *v = rbuf((size_t)T * H * DV, -1, 1), *beta = rbuf((size_t)T * H, 0.1f, 0.9f);
    float *la = rbuf((size_t)T * H, -0.3f, 0.0f), *s0 = rbuf((size_t)NSEQ * H * DK * DV, -1, 1);
    const st_entry e[] = {{"q", 4, {1, T, H, DK}, q},          {"k", 4, {1, T, H, DK}, k},
                          {"v", 4, {1, T, H, DV}, v},          {"beta", 3, {1, T, H}, beta},
                          {"log_alpha", 3, {1, T, H}, la},
                          {"initial_state", 4, {NSEQ, H, DK, DV}, s0}};
    char dir[] = "/tmp/ttt_varlen_XXXXXX", in_path[64], out_path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(in_path, sizeof in_path, "%s/in.safetensors", dir);
    snprintf(out_path, sizeof out_path, "%s/out.safetensors", dir);
    ttt_cfg_node *root = NULL, *layer = layer_of(yaml, &root);
    ttt_error err = {0};
    const char *dtypes[2] = {"I64", "I32"};
    for (int di = 0; di < 2; di++) {
        write_st(in_path, e, 6, CU, NSEQ + 1, dtypes[di]);
        ck_assert_msg(ttt_apply_file(layer, in_path, out_path, &err) == TTT_OK, "%s", err.msg);
        ttt_st_file *out = NULL;
        ck_assert_msg(ttt_st_read(out_path, &out, &err) == TTT_OK, "%s", err.msg);
        const ttt_st_tensor *o = ttt_st_find(out, "o"), *fs = ttt_st_find(out, "final_state");
        ck_assert_ptr_nonnull(o);
        ck_assert_ptr_nonnull(fs);
        ck_assert_int_eq(fs->shape[0], NSEQ);
        /* each sequence alone, from memory */
        for (int n = 0; n < NSEQ; n++) {
            const int64_t t0 = CU[n], len = CU[n + 1] - CU[n];
            ttt_st_tensor ts[6] = {
                {.name = "q", .ndim = 4, .shape = {1, len, H, DK}, .data = q + t0 * H * DK},
                {.name = "k", .ndim = 4, .shape = {1, len, H, DK}, .data = k + t0 * H * DK},
                {.name = "v", .ndim = 4, .shape = {1, len, H, DV}, .data = v + t0 * H * DV},
                {.name = "beta", .ndim = 3, .shape = {1, len, H}, .data = beta + t0 * H},
                {.name = "log_alpha", .ndim = 3, .shape = {1, len, H}, .data = la + t0 * H},
                {.name = "initial_state", .ndim = 4, .shape = {1, H, DK, DV},
                 .data = s0 + (size_t)n * H * DK * DV}};
            if (len == 0) /* a T = 0 tensor has no data (the reader's convention) */
                for (int i = 0; i < 5; i++) ts[i].data = NULL;
            ttt_st_file one = {.path = "one", .n = 6, .t = ts};
            ttt_apply_out r;
            ck_assert_msg(ttt_apply(layer, &one, &r, &err) == TTT_OK, "%s", err.msg);
            ck_assert_msg(!memcmp(r.t[0].data, o->data + t0 * H * DV,
                                  (size_t)len * H * DV * sizeof(float)),
                          "%s: o of sequence %d differs", dtypes[di], n);
            ck_assert_msg(!memcmp(r.t[1].data, fs->data + (size_t)n * H * DK * DV,
                                  (size_t)H * DK * DV * sizeof(float)),
                          "%s: final state of sequence %d differs", dtypes[di], n);
            ttt_apply_out_free(&r);
        }
        /* the comparison sees a missing reset: sequence 3 continued from sequence 2's state
         * (the same tokens as one sequence) gives another output */
        ttt_st_tensor whole[5] = {
            {.name = "q", .ndim = 4, .shape = {1, T, H, DK}, .data = q},
            {.name = "k", .ndim = 4, .shape = {1, T, H, DK}, .data = k},
            {.name = "v", .ndim = 4, .shape = {1, T, H, DV}, .data = v},
            {.name = "beta", .ndim = 3, .shape = {1, T, H}, .data = beta},
            {.name = "log_alpha", .ndim = 3, .shape = {1, T, H}, .data = la}};
        ttt_st_file all = {.path = "all", .n = 5, .t = whole};
        ttt_apply_out r;
        ck_assert_msg(ttt_apply(layer, &all, &r, &err) == TTT_OK, "%s", err.msg);
        ck_assert(memcmp(r.t[0].data + CU[3] * H * DV, o->data + CU[3] * H * DV,
                         (size_t)(CU[4] - CU[3]) * H * DV * sizeof(float)) != 0);
        ttt_apply_out_free(&r);
        ttt_st_free(out);
    }
    /* refusals: float offsets, offsets that decrease, a state of B rows */
    write_st(in_path, e, 6, CU, NSEQ + 1, "F32");
    ck_assert_int_eq(ttt_apply_file(layer, in_path, out_path, &err), TTT_ERR_SHAPE);
    ck_assert_msg(strstr(err.msg, "tensor 'cu_seqlens' is F32; expected integer offsets"), "%s",
                  err.msg);
    const int64_t bad[NSEQ + 1] = {0, 37, 36, 38, 109, 120};
    write_st(in_path, e, 6, bad, NSEQ + 1, "I64");
    ck_assert_int_eq(ttt_apply_file(layer, in_path, out_path, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "in.safetensors: cu_seqlens[2] = 36 < cu_seqlens[1] = 37"),
                  "%s", err.msg);
    write_st(in_path, e, 6, CU, NSEQ, "I64"); /* 4 sequences: the 5 states do not fit */
    ck_assert_int_eq(ttt_apply_file(layer, in_path, out_path, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "cu_seqlens[4] = 109 (the last offset); expected T = 120"),
                  "%s", err.msg);
    const int64_t four[5] = {0, 37, 38, 109, 120};
    write_st(in_path, e, 6, four, 5, "I64");
    ck_assert_int_eq(ttt_apply_file(layer, in_path, out_path, &err), TTT_ERR_SHAPE);
    ck_assert_msg(strstr(err.msg, "expected (n_seqs, H, *W) = (4, 2, 4, 4)"), "%s", err.msg);
    unlink(in_path);
    unlink(out_path);
    rmdir(dir);
    ttt_cfg_free(root);
    free(q), free(k), free(v), free(beta), free(la), free(s0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("varlen");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, bad_offsets_are_named);
    tcase_add_test(tc, a_changed_input_is_seen);
    tcase_add_test(tc, apply_reads_cu_seqlens);
    tcase_add_test(tc, forward_equals_one_call_per_sequence);
    tcase_add_test(tc, backward_equals_one_call_per_sequence);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
