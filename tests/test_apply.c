/* Tensors in, tensors out (src/app/apply.h): the (B, T, H, D) layout conversion checked per
 * (batch, head) against the closed kernels run directly on hand-gathered slices, the state
 * layout through a split sequence, and the whole path against float64 reference dumps made by
 * PyTorch (tests/data/make_reference.py). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "apply.h"
#include "testutil.h"
#include "internal.h"

/* Index of element (b, t, h, i) of a (B, T, H, D) tensor and of (b, h, r, c) of (B, H, R, C),
 * written here independently of src/app/apply.c. */
#define BTHD(b, t, h, i, T, H, D) ((((size_t)(b) * (T) + (t)) * (H) + (h)) * (D) + (i))
#define BHRC(b, h, r, c, H, R, C) ((((size_t)(b) * (H) + (h)) * (R) + (r)) * (C) + (c))

/* float32 forms of one recurrence against a float64 evaluation accumulate rounding over T
 * steps; 2e-5 relative to the largest entry is ~100 float32 ulps, far below any real
 * discrepancy (a dropped term, a swapped head or an off-by-one token changes outputs at O(1)
 * relative scale). The same tolerance as tests/test_layer.c. */
#define RTOL 2e-5
#define ATOL 1e-6

typedef struct inputs {
    int B, T, H, dk, dv;
    float *q, *k, *v, *beta, *la, *S0; /* la: (B, T, H) or (B, T, H, dk) when la_vec */
    int la_vec;
} inputs;

static float *randn(ttt_rng *r, size_t n, float std) {
    float *x = malloc(n * sizeof *x + 1);
    ttt_rng_fill_normal(r, x, n, 0.0f, std);
    return x;
}
static float *uniform(ttt_rng *r, size_t n, float lo, float hi) {
    float *x = malloc(n * sizeof *x + 1);
    ttt_rng_fill_uniform(r, x, n, lo, hi);
    return x;
}

/* Random inputs; keys of unit norm (the delta rule with β ≤ 1 is then a contraction). */
static inputs make_inputs(uint64_t seed, int B, int T, int H, int dk, int dv, int gates,
                          int la_vec, int init) {
    ttt_rng r;
    ttt_rng_seed(&r, seed);
    inputs in = {.B = B, .T = T, .H = H, .dk = dk, .dv = dv, .la_vec = la_vec};
    size_t nk = (size_t)B * T * H * dk, nv = (size_t)B * T * H * dv, nt = (size_t)B * T * H;
    in.q = randn(&r, nk, 1.0f);
    in.k = randn(&r, nk, 1.0f);
    for (size_t row = 0; row < nt; row++) {
        double s = 0;
        for (int i = 0; i < dk; i++) s += (double)in.k[row * dk + i] * in.k[row * dk + i];
        for (int i = 0; i < dk; i++) in.k[row * dk + i] /= (float)sqrt(s);
    }
    in.v = randn(&r, nv, 1.0f);
    if (gates) {
        in.beta = uniform(&r, nt, 0.1f, 0.9f);
        in.la = uniform(&r, la_vec ? nk : nt, -0.3f, 0.0f);
    }
    if (init) in.S0 = randn(&r, (size_t)B * H * dk * dv, 0.5f);
    return in;
}
static void free_inputs(inputs *in) {
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->beta);
    free(in->la);
    free(in->S0);
}

/* The inputs as safetensors entries (pointers into `in`). */
static int as_tensors(const inputs *in, ttt_st_tensor *ts) {
    int n = 0;
    ts[n++] = (ttt_st_tensor){"q", 4, {in->B, in->T, in->H, in->dk}, in->q, "", NULL};
    ts[n++] = (ttt_st_tensor){"k", 4, {in->B, in->T, in->H, in->dk}, in->k, "", NULL};
    ts[n++] = (ttt_st_tensor){"v", 4, {in->B, in->T, in->H, in->dv}, in->v, "", NULL};
    if (in->beta) ts[n++] = (ttt_st_tensor){"beta", 3, {in->B, in->T, in->H}, in->beta, "", NULL};
    if (in->la)
        ts[n++] = in->la_vec
                      ? (ttt_st_tensor){"log_alpha", 4, {in->B, in->T, in->H, in->dk}, in->la, "",
                                        NULL}
                      : (ttt_st_tensor){"log_alpha", 3, {in->B, in->T, in->H}, in->la, "", NULL};
    if (in->S0)
        ts[n++] = (ttt_st_tensor){"initial_state", 4, {in->B, in->H, in->dk, in->dv}, in->S0, "",
                                  NULL};
    return n;
}

static ttt_cfg_node *load_layer(const char *yaml, ttt_cfg_node **root) {
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(yaml, "test.yaml", root, &err) == TTT_OK, "%s", err.msg);
    ttt_cfg_node *layer = (ttt_cfg_node *)ttt_cfg_get(*root, "layer");
    ck_assert_ptr_nonnull(layer);
    return layer;
}

/* Write the inputs to dir/in.safetensors, run ttt_apply_file with `yaml`, read the output. */
static ttt_st_file *run_apply_file(const char *dir, const ttt_st_tensor *ts, int n,
                                   const char *yaml) {
    char in_path[512], out_path[512];
    snprintf(in_path, sizeof in_path, "%s/in.safetensors", dir);
    snprintf(out_path, sizeof out_path, "%s/out.safetensors", dir);
    ttt_error err = {0};
    ck_assert_msg(ttt_st_write(in_path, ts, n, NULL, 0, &err) == TTT_OK, "%s", err.msg);
    ttt_cfg_node *root = NULL, *layer = load_layer(yaml, &root);
    ck_assert_msg(ttt_apply_file(layer, in_path, out_path, &err) == TTT_OK, "%s", err.msg);
    ttt_cfg_free(root);
    ttt_st_file *out = NULL;
    ck_assert_msg(ttt_st_read(out_path, &out, &err) == TTT_OK, "%s", err.msg);
    return out;
}

static void check_shape(const ttt_st_tensor *t, int ndim, const int64_t *want) {
    char s[128];
    ck_assert_ptr_nonnull(t);
    ck_assert_msg(t->ndim == ndim, "%s has shape %s", t->name, ttt_st_shape_str(t, s, sizeof s));
    for (int d = 0; d < ndim; d++)
        ck_assert_msg(t->shape[d] == want[d], "%s has shape %s", t->name,
                      ttt_st_shape_str(t, s, sizeof s));
}

/* Gather the (b, h) slices by hand, run the closed kernel on them, and compare with the output
 * file's (b, h) slices. kernel 0: delta rule; 1: linear attention (vector gate when la_vec).
 * The kernel is the one `form: recurrent` runs, on the same float32 numbers in the same order,
 * so the comparison is exact: any difference means the layout conversion moved a number. */
static void compare_with_kernel(const inputs *in, const ttt_st_file *out, int kernel) {
    const int B = in->B, T = in->T, H = in->H, dk = in->dk, dv = in->dv;
    const ttt_st_tensor *o = ttt_st_find(out, "o"), *fs = ttt_st_find(out, "final_state");
    check_shape(o, 4, (int64_t[]){B, T, H, dv});
    check_shape(fs, 4, (int64_t[]){B, H, dk, dv});
    float *q = malloc(sizeof(float) * T * dk), *k = malloc(sizeof(float) * T * dk);
    float *v = malloc(sizeof(float) * T * dv), *beta = malloc(sizeof(float) * T);
    float *la = malloc(sizeof(float) * T * dk), *S = malloc(sizeof(float) * dk * dv);
    float *ow = malloc(sizeof(float) * T * dv), *og = malloc(sizeof(float) * T * dv);
    float *Sg = malloc(sizeof(float) * dk * dv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            for (int t = 0; t < T; t++) {
                for (int i = 0; i < dk; i++) {
                    q[t * dk + i] = in->q[BTHD(b, t, h, i, T, H, dk)];
                    k[t * dk + i] = in->k[BTHD(b, t, h, i, T, H, dk)];
                    if (in->la && in->la_vec) la[t * dk + i] = in->la[BTHD(b, t, h, i, T, H, dk)];
                }
                for (int j = 0; j < dv; j++) {
                    v[t * dv + j] = in->v[BTHD(b, t, h, j, T, H, dv)];
                    og[t * dv + j] = o->data[BTHD(b, t, h, j, T, H, dv)];
                }
                if (in->beta) beta[t] = in->beta[BTHD(b, t, h, 0, T, H, 1)];
                if (in->la && !in->la_vec) la[t] = in->la[BTHD(b, t, h, 0, T, H, 1)];
            }
            for (int r = 0; r < dk; r++)
                for (int c = 0; c < dv; c++) {
                    S[r * dv + c] = in->S0 ? in->S0[BHRC(b, h, r, c, H, dk, dv)] : 0.0f;
                    Sg[r * dv + c] = fs->data[BHRC(b, h, r, c, H, dk, dv)];
                }
            if (kernel == 0)
                ttt_delta_rule_recurrent(ow, S, q, k, v, in->beta ? beta : NULL,
                                         in->la ? la : NULL, T, dk, dv);
            else
                ttt_linear_attention_recurrent(ow, S, q, k, v, in->beta ? beta : NULL,
                                               in->la ? la : NULL, in->la_vec, T, dk, dv);
            TU_ASSERT_CLOSE_F(og, ow, (size_t)T * dv, 0.0, 0.0);
            TU_ASSERT_CLOSE_F(Sg, S, (size_t)dk * dv, 0.0, 0.0);
        }
    free(q), free(k), free(v), free(beta), free(la), free(S), free(ow), free(og), free(Sg);
}

START_TEST(deltanet_matches_kernel_per_head) {
    inputs in = make_inputs(1, 2, 17, 3, 8, 5, 1, 0, 0);
    free(in.la); /* deltanet: beta only */
    in.la = NULL;
    ttt_st_tensor ts[6];
    int n = as_tensors(&in, ts);
    char *dir = tu_mkdtemp();
    ttt_st_file *out = run_apply_file(dir, ts, n, "layer: {preset: deltanet, form: recurrent}\n");
    ck_assert_int_eq(out->n, 2);
    ck_assert_str_eq(out->t[0].name, "o");
    ck_assert_str_eq(out->t[1].name, "final_state");
    ck_assert_str_eq(ttt_st_meta(out, "preset"), "deltanet");
    ck_assert_str_eq(ttt_st_meta(out, "form"), "recurrent");
    ck_assert_str_eq(ttt_st_meta(out, "ttt_version"), TTT_VERSION);
    ck_assert_str_eq(ttt_st_meta(out, "layout"), "BTHD");
    ck_assert_msg(strstr(ttt_st_meta(out, "layer"), "loss: squared"), "%s",
                  ttt_st_meta(out, "layer"));
    compare_with_kernel(&in, out, 0);
    ttt_st_free(out);
    tu_rmtree(dir);
    free(dir);
    free_inputs(&in);
}
END_TEST

START_TEST(gated_deltanet_gates_and_initial_state) {
    inputs in = make_inputs(2, 2, 17, 3, 6, 7, 1, 0, 1);
    ttt_st_tensor ts[6];
    int n = as_tensors(&in, ts);
    char *dir = tu_mkdtemp();
    ttt_st_file *out =
        run_apply_file(dir, ts, n, "layer: {preset: gated_deltanet, form: recurrent}\n");
    compare_with_kernel(&in, out, 0);
    ttt_st_free(out);
    tu_rmtree(dir);
    free(dir);
    free_inputs(&in);
}
END_TEST

START_TEST(gla_vector_gate_matches_kernel_per_head) {
    inputs in = make_inputs(3, 2, 17, 3, 8, 5, 1, 1, 1);
    ttt_st_tensor ts[6];
    int n = as_tensors(&in, ts);
    char *dir = tu_mkdtemp();
    ttt_st_file *out = run_apply_file(dir, ts, n, "layer: {preset: gla, form: recurrent}\n");
    compare_with_kernel(&in, out, 1);
    ttt_st_free(out);
    tu_rmtree(dir);
    free(dir);
    free_inputs(&in);
}
END_TEST

/* The (b, h) → slice mapping must not be symmetric by accident: the test above would also pass
 * if apply mixed up heads in a way the hand gathering mirrors. Here every head gets a different
 * constant v, and the output of head h must carry that head's constant. */
START_TEST(heads_and_batches_stay_apart) {
    const int B = 2, T = 5, H = 3, dk = 4, dv = 2;
    inputs in = make_inputs(4, B, T, H, dk, dv, 0, 0, 0);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                for (int i = 0; i < dk; i++) /* k = q = e_0: o_t = Σ_{s≤t} v_s for linear attn */
                    in.k[BTHD(b, t, h, i, T, H, dk)] = in.q[BTHD(b, t, h, i, T, H, dk)] = i == 0;
                for (int j = 0; j < dv; j++) in.v[BTHD(b, t, h, j, T, H, dv)] = 10 * b + h + j;
            }
    ttt_st_tensor ts[6];
    int n = as_tensors(&in, ts);
    char *dir = tu_mkdtemp();
    ttt_st_file *out = run_apply_file(dir, ts, n, "layer: {preset: linear_attention}\n");
    const ttt_st_tensor *o = ttt_st_find(out, "o");
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                for (int j = 0; j < dv; j++)
                    ck_assert_msg(fabsf(o->data[BTHD(b, t, h, j, T, H, dv)] -
                                        (float)((t + 1) * (10 * b + h + j))) < 1e-4f,
                                  "o[%d, %d, %d, %d] = %g", b, t, h, j,
                                  o->data[BTHD(b, t, h, j, T, H, dv)]);
    ttt_st_free(out);
    tu_rmtree(dir);
    free(dir);
    free_inputs(&in);
}
END_TEST

/* Slice [t0, t0 + len) along T of a (B, T, H, D) array. */
static float *slice_T(const float *x, int B, int T, int H, int D, int t0, int len) {
    float *y = malloc(sizeof(float) * B * len * H * D + 1);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < len; t++)
            memcpy(y + BTHD(b, t, 0, 0, len, H, D), x + BTHD(b, t0 + t, 0, 0, T, H, D),
                   sizeof(float) * H * D);
    return y;
}

/* Run [0, T1) then [T1, T) with the first call's final_state(s) as the second call's
 * initial_state(s): the o's put together must equal one pass, and so must the final states.
 * `yaml` selects the layer; T1 must be a multiple of its mini-batch size. */
static void check_split_resume(const char *yaml, int T1, int dk, int dv, int with_log_alpha) {
    const int B = 2, T = 17, H = 3;
    inputs in = make_inputs(5, B, T, H, dk, dv, 1, 0, 0);
    if (!with_log_alpha) {
        free(in.la);
        in.la = NULL;
    }
    char *dir = tu_mkdtemp();
    ttt_st_tensor ts[6 + TTT_BATCH_MAX_STATE];
    int n = as_tensors(&in, ts);
    ttt_st_file *full = run_apply_file(dir, ts, n, yaml);

    inputs p1 = in, p2 = in;
    p1.T = T1;
    p2.T = T - T1;
    p1.q = slice_T(in.q, B, T, H, dk, 0, T1), p2.q = slice_T(in.q, B, T, H, dk, T1, T - T1);
    p1.k = slice_T(in.k, B, T, H, dk, 0, T1), p2.k = slice_T(in.k, B, T, H, dk, T1, T - T1);
    p1.v = slice_T(in.v, B, T, H, dv, 0, T1), p2.v = slice_T(in.v, B, T, H, dv, T1, T - T1);
    p1.beta = slice_T(in.beta, B, T, H, 1, 0, T1);
    p2.beta = slice_T(in.beta, B, T, H, 1, T1, T - T1);
    if (in.la) {
        p1.la = slice_T(in.la, B, T, H, 1, 0, T1);
        p2.la = slice_T(in.la, B, T, H, 1, T1, T - T1);
    }
    n = as_tensors(&p1, ts);
    ttt_st_file *first = run_apply_file(dir, ts, n, yaml);
    n = as_tensors(&p2, ts);
    /* every final_state* of the first call becomes the matching initial_state* */
    char names[TTT_BATCH_MAX_STATE][48];
    int n_w = 0;
    for (int i = 0; i < first->n; i++) {
        const ttt_st_tensor *t = &first->t[i];
        if (strncmp(t->name, "final_state", 11) != 0) continue;
        snprintf(names[n_w], sizeof names[n_w], "initial_state%s", t->name + 11);
        ts[n] = *t;
        ts[n++].name = names[n_w++];
    }
    ck_assert_int_eq(n_w, first->n - 1);
    ttt_st_file *second = run_apply_file(dir, ts, n, yaml);

    const ttt_st_tensor *o = ttt_st_find(full, "o");
    const ttt_st_tensor *o1 = ttt_st_find(first, "o"), *o2 = ttt_st_find(second, "o");
    size_t no = (size_t)B * T * H * dv;
    double *want = malloc(sizeof(double) * no);
    float *got = malloc(sizeof(float) * no);
    for (size_t i = 0; i < no; i++) want[i] = o->data[i];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            memcpy(got + BTHD(b, t, 0, 0, T, H, dv),
                   t < T1 ? o1->data + BTHD(b, t, 0, 0, T1, H, dv)
                          : o2->data + BTHD(b, t - T1, 0, 0, T - T1, H, dv),
                   sizeof(float) * H * dv);
    TU_ASSERT_CLOSE(got, want, no, ATOL, RTOL);
    for (int i = 1; i < full->n; i++) {
        const ttt_st_tensor *a = &full->t[i], *c = ttt_st_find(second, a->name);
        ck_assert_ptr_nonnull(c);
        size_t m = (size_t)ttt_st_numel(a);
        double *w = malloc(sizeof(double) * m);
        for (size_t j = 0; j < m; j++) w[j] = a->data[j];
        TU_ASSERT_CLOSE(c->data, w, m, ATOL, RTOL);
        free(w);
    }
    free(want), free(got);
    ttt_st_free(full), ttt_st_free(first), ttt_st_free(second);
    free_inputs(&in);
    p1.S0 = p2.S0 = NULL; /* shared with `in` (NULL here anyway); the rest are the slices */
    free_inputs(&p1), free_inputs(&p2);
    tu_rmtree(dir);
    free(dir);
}

START_TEST(split_sequence_resumes_through_state) {
    /* the default form (auto) of gated_deltanet */
    check_split_resume("layer: {preset: gated_deltanet, chunk: 4}\n", 7, 8, 5, 1);
}
END_TEST

/* The optimizer's state is carried too: Titans' momentum (final_state.opt0) and LaCT's momentum
 * and renormalization targets. Without it the second call restarts the momentum at zero, and
 * Titans' continuation was 33 % off. Split at a block boundary (b = 4, T1 = 8), so the blocks of
 * the two calls are those of one call. */
START_TEST(split_carries_optimizer_state) {
    check_split_resume("layer: {preset: titans, mini_batch: 4}\n", 8, 8, 5, 1);
    check_split_resume("layer: {preset: lact, mini_batch: 4, optimizer: {momentum: 0.5}}\n", 8, 6,
                       6, 1);
}
END_TEST

/* A model with two weights of different ranks (ttt_linear: W (d, d), b (d)): names
 * final_state.0 / .1, shapes (B, H, *W_i), and the state round trip through initial_state.i. */
START_TEST(several_weights_named_and_resumable) {
    const char *yaml = "layer: {preset: ttt_linear, mini_batch: 4, optimizer: {name: sgd, lr: "
                       "0.3}}\n";
    check_split_resume(yaml, 8, 6, 6, 0); /* (TTT-Linear has no forget gate) */
    inputs in = make_inputs(6, 2, 9, 3, 6, 6, 0, 0, 0);
    ttt_st_tensor ts[6];
    int n = as_tensors(&in, ts);
    char *dir = tu_mkdtemp();
    ttt_st_file *out = run_apply_file(dir, ts, n, yaml);
    ck_assert_int_eq(out->n, 3);
    ck_assert_ptr_null(ttt_st_find(out, "final_state"));
    check_shape(ttt_st_find(out, "final_state.0"), 4, (int64_t[]){2, 3, 6, 6});
    check_shape(ttt_st_find(out, "final_state.1"), 3, (int64_t[]){2, 3, 6});
    ttt_st_free(out);
    tu_rmtree(dir);
    free(dir);
    free_inputs(&in);
}
END_TEST

/* Against PyTorch: tests/data/{delta,gla}_reference.safetensors hold F32 inputs, F64 expected outputs of a
 * naive float64 recurrence and, in the metadata, the layer to run. Every form that claims the
 * tuple must reproduce them. */
static void check_reference(const char *path) {
    ttt_error err = {0};
    ttt_st_file *ref = NULL;
    ck_assert_msg(ttt_st_read(path, &ref, &err) == TTT_OK, "%s", err.msg);
    const char *layer_text = ttt_st_meta(ref, "layer");
    ck_assert_ptr_nonnull(layer_text);
    ttt_st_tensor ts[8];
    int n = 0;
    for (int i = 0; i < ref->n; i++)
        if (strncmp(ref->t[i].name, "expected.", 9) != 0) ts[n++] = ref->t[i];
    ck_assert_int_eq(n, 6);
    const ttt_st_tensor *eo = ttt_st_find(ref, "expected.o");
    const ttt_st_tensor *es = ttt_st_find(ref, "expected.final_state");
    ck_assert_str_eq(eo->dtype, "F64");
    /* The reader rounds the F64 expectations to float32: a relative change of at most 6e-8,
     * negligible against RTOL. */
    size_t no = (size_t)ttt_st_numel(eo), ns = (size_t)ttt_st_numel(es);
    double *wo = malloc(sizeof(double) * no), *ws = malloc(sizeof(double) * ns);
    for (size_t i = 0; i < no; i++) wo[i] = eo->data[i];
    for (size_t i = 0; i < ns; i++) ws[i] = es->data[i];
    char *dir = tu_mkdtemp();
    char yaml[512];
    snprintf(yaml, sizeof yaml, "layer: %s\n", layer_text);
    /* every form the layer says it can compute this tuple in (recurrent and generic always) */
    const char *forms[64];
    int n_forms = 0;
    {
        ttt_cfg_node *root = NULL, *layer = load_layer(yaml, &root);
        ttt_layer L;
        const int d_k = (int)ttt_st_find(ref, "q")->shape[3], d_v = (int)eo->shape[3];
        ck_assert_msg(ttt_layer_parse(layer, d_k, d_v, &L, &err) == TTT_OK, "%s", err.msg);
        for (int f = 0; f < ttt_form_count(); f++) {
            const char *name = ttt_form_at(f)->form;
            int seen = 0;
            for (int g = 0; g < n_forms; g++) seen |= strcmp(forms[g], name) == 0;
            if (!seen && !tu_form_unavailable(&L, name)) forms[n_forms++] = name;
        }
        ck_assert_ptr_null(tu_form_unavailable(&L, "recurrent"));
        ck_assert_ptr_null(tu_form_unavailable(&L, "generic"));
        ttt_cfg_free(root);
    }
    for (int f = 0; f < n_forms; f++) {
        ttt_cfg_node *root = NULL, *layer = load_layer(yaml, &root);
        ttt_cfg_map_set(layer, "form", ttt_cfg_new_scalar(forms[f], layer));
        ttt_cfg_map_set(layer, "chunk", ttt_cfg_new_scalar("4", layer)); /* T = 13: 3 + partial */
        char in_path[512], out_path[512];
        snprintf(in_path, sizeof in_path, "%s/in.safetensors", dir);
        snprintf(out_path, sizeof out_path, "%s/out.safetensors", dir);
        ck_assert_msg(ttt_st_write(in_path, ts, n, NULL, 0, &err) == TTT_OK, "%s", err.msg);
        ck_assert_msg(ttt_apply_file(layer, in_path, out_path, &err) == TTT_OK, "%s form %s: %s",
                      path, forms[f], err.msg);
        ttt_cfg_free(root);
        ttt_st_file *out = NULL;
        ck_assert_msg(ttt_st_read(out_path, &out, &err) == TTT_OK, "%s", err.msg);
        ck_assert_str_eq(ttt_st_meta(out, "form"), forms[f]);
        const ttt_st_tensor *o = ttt_st_find(out, "o"), *S = ttt_st_find(out, "final_state");
        check_shape(o, 4, eo->shape);
        check_shape(S, 4, es->shape);
        {
            char m[512];
            ck_assert_msg(tu_close(o->data, wo, no, ATOL, RTOL, m, sizeof m), "%s, form %s, o: %s",
                          path, forms[f], m);
            ck_assert_msg(tu_close(S->data, ws, ns, ATOL, RTOL, m, sizeof m),
                          "%s, form %s, final_state: %s", path, forms[f], m);
        }
        ttt_st_free(out);
    }
    free(wo), free(ws);
    ttt_st_free(ref);
    tu_rmtree(dir);
    free(dir);
}

START_TEST(matches_pytorch_gated_delta_reference) {
    check_reference("tests/data/delta_reference.safetensors");
}
END_TEST

START_TEST(matches_pytorch_gla_reference) {
    check_reference("tests/data/gla_reference.safetensors");
}
END_TEST

/* An empty sequence (T = 0) is fine: no output rows, the initial state comes back unchanged. */
START_TEST(empty_sequence_returns_initial_state) {
    inputs in = make_inputs(7, 2, 0, 3, 4, 5, 0, 0, 1);
    ttt_st_tensor ts[6];
    int n = as_tensors(&in, ts);
    char *dir = tu_mkdtemp();
    ttt_st_file *out = run_apply_file(dir, ts, n, "layer: {preset: deltanet}\n");
    check_shape(ttt_st_find(out, "o"), 4, (int64_t[]){2, 0, 3, 5});
    const ttt_st_tensor *S = ttt_st_find(out, "final_state");
    ck_assert_int_eq(memcmp(S->data, in.S0, sizeof(float) * 2 * 3 * 4 * 5), 0);
    ttt_st_free(out);
    tu_rmtree(dir);
    free(dir);
    free_inputs(&in);
}
END_TEST

/* Layers over the forms ttt_apply can run, with the gates each takes (0 none, 1 per token, 2 per
 * token and key dimension); the chunk (8) and mini-batches (4, 8) do not divide T below. */
static const struct {
    const char *yaml;
    int gates;
} forms[] = {
    {"layer: {preset: mamba2, form: recurrent}\n", 1},
    {"layer: {preset: mamba2, form: chunkwise, chunk: 8}\n", 1},
    {"layer: {preset: mamba2, form: parallel}\n", 1},
    {"layer: {preset: mamba2, form: generic}\n", 1},
    {"layer: {preset: gla, form: chunkwise, chunk: 8}\n", 2},
    {"layer: {preset: gla, form: parallel}\n", 2},
    {"layer: {preset: deltanet, form: recurrent}\n", 0},
    {"layer: {preset: deltanet, form: chunkwise, chunk: 8}\n", 0},
    {"layer: {preset: deltanet, form: parallel}\n", 0},
    {"layer: {preset: gated_deltanet, form: chunkwise, chunk: 8}\n", 1},
    {"layer: {preset: gated_deltanet, form: generic}\n", 1},
    {"layer: {preset: titans, form: chunkwise, mini_batch: 4}\n", 0},
    {"layer: {preset: ttt_linear, form: dual, mini_batch: 4}\n", 0},
    {"layer: {preset: ttt_mlp, form: generic, mini_batch: 4}\n", 0},
    {"layer: {preset: lact, form: chunkwise, mini_batch: 8}\n", 0},
    {"layer: {preset: linear_attention, normalize: ratio}\n", 0},
    {"layer: {preset: retnet, form: chunkwise, chunk: 8, normalize: rms, rope: true, scale: "
     "0.5}\n",
     0},
};

/* ttt_apply keeps one output slice per thread for all its sequences, and the layer writes into
 * it directly (ttt_layer_forward has no temporary output without a tape), so the slice holds the
 * previous sequence's output when the next one starts: every form must write every element of o
 * whatever it held. Each layer runs once on o filled with NaN and once on o filled with zeros;
 * the outputs must be finite and identical byte for byte (an element a form skipped or
 * accumulated into would stay NaN in one run and differ from the other). */
START_TEST(every_form_writes_all_of_its_output) {
    const int T = 21, dk = 6, dv = 6;
    ttt_cfg_node *root = NULL, *map = load_layer(forms[_i].yaml, &root);
    ttt_layer L;
    ttt_error err = {0};
    ck_assert_msg(ttt_layer_parse(map, dk, dv, &L, &err) == TTT_OK, "%s", err.msg);
    inputs in = make_inputs(20 + (uint64_t)_i, 1, T, 1, dk, dv, forms[_i].gates != 0,
                            forms[_i].gates == 2, 0);
    ttt_arena arena;
    ttt_arena_init(&arena, 0);
    ttt_ctx ctx = {.arena = &arena};
    float *o_run[2];
    for (int r = 0; r < 2; r++) {
        o_run[r] = malloc(sizeof(float) * T * dv);
        for (int i = 0; i < T * dv; i++) o_run[r][i] = r == 0 ? NAN : 0.0f;
        ttt_tensor q = ttt_tensor_view2(in.q, T, dk), k = ttt_tensor_view2(in.k, T, dk);
        ttt_tensor v = ttt_tensor_view2(in.v, T, dv), o = ttt_tensor_view2(o_run[r], T, dv);
        ttt_tensor eta = in.beta ? ttt_tensor_view(in.beta, 1, (int[]){T}) : (ttt_tensor){0};
        ttt_tensor la = !in.la       ? (ttt_tensor){0}
                        : in.la_vec ? ttt_tensor_view2(in.la, T, dk)
                                    : ttt_tensor_view(in.la, 1, (int[]){T});
        ttt_rng rng;
        ttt_rng_seed(&rng, 3); /* the same initial weights in both runs */
        ttt_layer_state st;
        ttt_layer_state_init(&ctx, &L, &st, &rng);
        ck_assert_msg(ttt_layer_forward(&ctx, &L, &o, &st, &q, &k, &v, in.beta ? &eta : NULL,
                                        in.la ? &la : NULL, &err) == TTT_OK,
                      "%s: %s", forms[_i].yaml, err.msg);
        ttt_arena_reset(&arena);
    }
    for (int i = 0; i < T * dv; i++)
        ck_assert_msg(isfinite(o_run[0][i]) &&
                          memcmp(&o_run[0][i], &o_run[1][i], sizeof(float)) == 0,
                      "%s: o[%d] = %g on a NaN-filled output, %g on a zeroed one", forms[_i].yaml,
                      i, o_run[0][i], o_run[1][i]);
    free(o_run[0]), free(o_run[1]);
    ttt_arena_free(&arena);
    free_inputs(&in);
    ttt_cfg_free(root);
}
END_TEST

/* The whole file against each (b, h) sequence run alone as a one-head file (B = H = 1). Alone, the
 * layer reads the file's arrays and writes the output in place; in the whole file the sequences
 * are gathered into slices (or, for the layers of in_place below, read with row strides), share
 * one thread's slices and arena (so each starts on the previous one's leftovers) and are
 * scattered back. Same numbers in, same order of operations: o and the
 * final state must agree byte for byte, for every form. Initial states are given so that models
 * which draw their initial weights per head start alike in both runs. */
START_TEST(each_sequence_alone_gives_the_same_bits) {
    const int B = 2, T = 21, H = 3, dk = 6, dv = 6;
    ttt_cfg_node *root = NULL, *map = load_layer(forms[_i].yaml, &root);
    ttt_layer L;
    ttt_error err = {0};
    ck_assert_msg(ttt_layer_parse(map, dk, dv, &L, &err) == TTT_OK, "%s", err.msg);
    ttt_cfg_free(root);
    /* initial_state (B, H, d_k, d_v) fits the models with one (d_k, d_v) weight */
    const int one_weight = L.model->n_weights == 1;
    inputs in = make_inputs(40 + (uint64_t)_i, B, T, H, dk, dv, forms[_i].gates != 0,
                            forms[_i].gates == 2, one_weight);
    ttt_st_tensor ts[6];
    const int n = as_tensors(&in, ts);
    ttt_st_file f = {.path = "in.safetensors", .n = n, .t = ts};
    ttt_apply_out all;
    map = load_layer(forms[_i].yaml, &root);
    ck_assert_msg(ttt_apply_threads(map, &f, &all, 1, &err) == TTT_OK, "%s", err.msg);
    ttt_cfg_free(root);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            /* without initial_state, models that draw initial weights draw them per head */
            if (!one_weight && h > 0) continue;
            inputs one = make_inputs(1, 1, T, 1, dk, dv, in.beta != NULL, in.la_vec, in.S0 != NULL);
            const int gk = in.la_vec ? dk : 1;
            for (int t = 0; t < T; t++) {
                memcpy(one.q + t * dk, in.q + BTHD(b, t, h, 0, T, H, dk), sizeof(float) * dk);
                memcpy(one.k + t * dk, in.k + BTHD(b, t, h, 0, T, H, dk), sizeof(float) * dk);
                memcpy(one.v + t * dv, in.v + BTHD(b, t, h, 0, T, H, dv), sizeof(float) * dv);
                if (in.beta) one.beta[t] = in.beta[BTHD(b, t, h, 0, T, H, 1)];
                if (in.la)
                    memcpy(one.la + t * gk, in.la + BTHD(b, t, h, 0, T, H, gk), sizeof(float) * gk);
            }
            if (in.S0)
                memcpy(one.S0, in.S0 + BHRC(b, h, 0, 0, H, dk, dv), sizeof(float) * dk * dv);
            ttt_st_tensor t1[6];
            ttt_st_file f1 = {.path = "one.safetensors", .n = as_tensors(&one, t1), .t = t1};
            ttt_apply_out alone;
            map = load_layer(forms[_i].yaml, &root);
            ck_assert_msg(ttt_apply_threads(map, &f1, &alone, 1, &err) == TTT_OK, "%s", err.msg);
            ttt_cfg_free(root);
            for (int t = 0; t < T; t++)
                ck_assert_msg(memcmp(all.t[0].data + BTHD(b, t, h, 0, T, H, dv),
                                     alone.t[0].data + (size_t)t * dv, sizeof(float) * dv) == 0,
                              "%s: o of batch %d, head %d, token %d differs", forms[_i].yaml, b, h,
                              t);
            for (int w = 1; w < all.n; w++) {
                const size_t m = (size_t)ttt_st_numel(&alone.t[w]); /* (1, 1, *W) */
                ck_assert_msg(memcmp(all.t[w].data + ((size_t)b * H + h) * m, alone.t[w].data,
                                     sizeof(float) * m) == 0,
                              "%s: %s of batch %d, head %d differs", forms[_i].yaml,
                              all.t[w].name, b, h);
            }
            ttt_apply_out_free(&alone);
            free_inputs(&one);
        }
    ttt_apply_out_free(&all);
    free_inputs(&in);
}
END_TEST

/* Layers ttt_apply runs with a kernel in place on the (B, T, H, D) arrays (src/app/apply.c,
 * apply_kernel_for: linear attention and the delta rule, recurrent, chunkwise or parallel), with
 * every part of the layer's prologue the in-place path reproduces: scale, θ ≠ 1, the constant decay
 * without gates, β absent; plus layers that must keep the gathered path (RoPE, normalization, the
 * delta rule with vector gates, which is an error either way). gates: 0 none, 1 per token, 2 per
 * token and key dimension, 3 per token without β. */
static const struct {
    const char *yaml;
    int gates;
} in_place[] = {
    {"layer: {preset: mamba2, form: chunkwise, chunk: 8}\n", 1},
    {"layer: {preset: mamba2, form: recurrent, scale: 0.3}\n", 1},
    {"layer: {preset: mamba2, form: parallel, optimizer: {lr: 0.5}}\n", 3},
    {"layer: {preset: gla, form: chunkwise, chunk: 16}\n", 2},
    {"layer: {preset: gla, form: recurrent, scale: 0.125, optimizer: {lr: 2.0}}\n", 2},
    {"layer: {preset: gla, form: parallel}\n", 2},
    {"layer: {preset: retnet, form: chunkwise, chunk: 5}\n", 0},
    {"layer: {preset: retnet, form: recurrent, optimizer: {lr: 0.7}}\n", 0},
    {"layer: {preset: linear_attention, form: chunkwise, chunk: 8}\n", 3},
    {"layer: {preset: deltanet, form: chunkwise, chunk: 8}\n", 0},
    {"layer: {preset: deltanet, form: recurrent, optimizer: {lr: 0.5}}\n", 3},
    {"layer: {preset: gated_deltanet, form: chunkwise, chunk: 8, scale: 0.25}\n", 1},
    {"layer: {preset: gated_deltanet, form: recurrent}\n", 0},
    {"layer: {preset: gated_deltanet, form: parallel}\n", 1},
    {"layer: {preset: mamba2, form: chunkwise, chunk: 8, rope: true}\n", 1},
    {"layer: {preset: retnet, form: chunkwise, chunk: 8, normalize: rms}\n", 0},
    {"layer: {preset: deltanet, form: chunkwise, chunk: 8}\n", 2},
};

/* ttt_apply with the environment variable TTT_APPLY_GATHER set to `gather` (NULL: unset). */
static ttt_status apply_gather_env(const char *yaml, const ttt_st_file *f, ttt_apply_out *out,
                                   int threads, const char *gather, ttt_error *err) {
    if (gather) ck_assert_int_eq(setenv("TTT_APPLY_GATHER", gather, 1), 0);
    else ck_assert_int_eq(unsetenv("TTT_APPLY_GATHER"), 0);
    ttt_cfg_node *root = NULL, *map = load_layer(yaml, &root);
    ttt_status st = ttt_apply_threads(map, f, out, threads, err);
    ttt_cfg_free(root);
    unsetenv("TTT_APPLY_GATHER");
    return st;
}

/* The in-place path equals the gathered one byte for byte (o and final_state, or the same error):
 * the same kernels on the same numbers, only the strides differ (kernels.h, ttt_form_ld; the
 * kernels' own strided tests are in tests/test_la_forms.c and tests/test_delta_forms.c).
 * TTT_APPLY_GATHER=1 forces the gathered path. Shapes: several heads and batches, T not a
 * multiple of the chunk, d_k ≠ d_v, initial states, on 2 threads for one path and 1 for the
 * other; and H = 1, where the gathered path runs the layer on the file's rows. The comparison can
 * fail: one query changed by 1.5e-5 relative in the last sequence gives different bytes. */
START_TEST(in_place_kernels_equal_gathered_path) {
    const int shapes[][5] = {{2, 37, 3, 8, 6}, {1, 29, 1, 5, 7}}; /* B, T, H, d_k, d_v */
    for (int sh = 0; sh < 2; sh++) {
        const int B = shapes[sh][0], T = shapes[sh][1], H = shapes[sh][2], dk = shapes[sh][3],
                  dv = shapes[sh][4];
        const int gates = in_place[_i].gates;
        inputs in = make_inputs(60 + (uint64_t)_i, B, T, H, dk, dv, gates != 0, gates == 2, 1);
        if (gates == 3) {
            free(in.beta);
            in.beta = NULL;
        }
        ttt_st_tensor ts[6];
        ttt_st_file f = {.path = "in.safetensors", .n = as_tensors(&in, ts), .t = ts};
        ttt_apply_out a, g;
        ttt_error ea = {0}, eg = {0};
        ttt_status sa = apply_gather_env(in_place[_i].yaml, &f, &a, 2, NULL, &ea);
        ttt_status sg = apply_gather_env(in_place[_i].yaml, &f, &g, 1, "1", &eg);
        ck_assert_msg(sa == sg && strcmp(ea.msg, eg.msg) == 0, "%s: '%s' in place, '%s' gathered",
                      in_place[_i].yaml, ea.msg, eg.msg);
        if (sa != TTT_OK) { /* the refused layer: the same error both ways, and it is one */
            ck_assert_msg(gates == 2, "%s: %s", in_place[_i].yaml, ea.msg);
            free_inputs(&in);
            continue;
        }
        ck_assert_int_eq(a.n, g.n);
        for (int w = 0; w < a.n; w++) {
            const size_t m = (size_t)ttt_st_numel(&a.t[w]);
            ck_assert_int_eq(ttt_st_numel(&g.t[w]), m);
            ck_assert_msg(memcmp(a.t[w].data, g.t[w].data, m * sizeof(float)) == 0,
                          "%s (B %d, T %d, H %d): %s differs", in_place[_i].yaml, B, T, H,
                          a.t[w].name);
        }
        ttt_apply_out_free(&g);
        /* the last sequence's query at token T/2, slightly changed, shows in its output */
        float *qp = in.q + BTHD(B - 1, T / 2, H - 1, 1, T, H, dk);
        *qp *= 1.0f + 0x1p-16f;
        ck_assert(apply_gather_env(in_place[_i].yaml, &f, &g, 1, "1", &eg) == TTT_OK);
        ck_assert_msg(memcmp(a.t[0].data, g.t[0].data,
                             (size_t)ttt_st_numel(&a.t[0]) * sizeof(float)) != 0,
                      "%s: a changed query went unnoticed", in_place[_i].yaml);
        ttt_apply_out_free(&g);
        ttt_apply_out_free(&a);
        free_inputs(&in);
    }
}
END_TEST

/* ---- errors: each names the tensors and shapes involved ---- */

typedef struct bad_input {
    const char *what;
    const char *phrase;
} bad_input;

static ttt_status apply_mem(const char *yaml, ttt_st_tensor *ts, int n, ttt_error *err) {
    ttt_st_file f = {.path = "in.safetensors", .n = n, .t = ts};
    ttt_cfg_node *root = NULL, *layer = load_layer(yaml, &root);
    ttt_apply_out out;
    ttt_status s = ttt_apply(layer, &f, &out, err);
    if (s == TTT_OK) ttt_apply_out_free(&out);
    ttt_cfg_free(root);
    return s;
}

START_TEST(shape_errors_name_tensors) {
    const int B = 2, T = 17, H = 3, dk = 8, dv = 5;
    inputs in = make_inputs(8, B, T, H, dk, dv, 1, 0, 1);
    ttt_st_tensor ts[8];
    ttt_error err = {0};
    const char *yaml = "layer: {preset: gated_deltanet}\n";
    int n = as_tensors(&in, ts);
    ck_assert_msg(apply_mem(yaml, ts, n, &err) == TTT_OK, "%s", err.msg);

    struct {
        int idx;        /* which tensor to change (q, k, v, beta, log_alpha, initial_state) */
        int ndim;
        int64_t shape[4];
        const char *phrase;
    } cases[] = {
        {0, 3, {2, 17, 3}, "in.safetensors: tensor 'q' has shape (2, 17, 3); expected 4 "
                           "dimensions (B, T, H, d_k)"},
        {1, 4, {2, 17, 3, 7}, "tensors 'q' (2, 17, 3, 8) and 'k' (2, 17, 3, 7) must have the same "
                              "shape"},
        {2, 4, {2, 16, 3, 5}, "tensor 'v' (2, 16, 3, 5) does not fit 'q' (2, 17, 3, 8): expected "
                              "(B, T, H, d_v) = (2, 17, 3, d_v)"},
        {3, 3, {2, 3, 17}, "tensor 'beta' (2, 3, 17) does not fit 'q' (2, 17, 3, 8): expected (B, "
                           "T, H) = (2, 17, 3)"},
        {4, 4, {2, 17, 3, 5}, "tensor 'log_alpha' (2, 17, 3, 5) does not fit 'q' (2, 17, 3, 8)"},
        {5, 4, {2, 3, 5, 8}, "tensor 'initial_state' (2, 3, 5, 8) does not fit: expected (B, H, "
                             "*W) = (2, 3, 8, 5)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        n = as_tensors(&in, ts);
        ts[cases[c].idx].ndim = cases[c].ndim;
        memcpy(ts[cases[c].idx].shape, cases[c].shape, sizeof cases[c].shape);
        /* (data is never read past the checks, so the unchanged buffers are large enough) */
        ck_assert_int_eq(apply_mem(yaml, ts, n, &err), TTT_ERR_SHAPE);
        ck_assert_msg(strstr(err.msg, cases[c].phrase), "case %zu: %s", c, err.msg);
    }

    n = as_tensors(&in, ts);
    ts[n - 1].name = "g"; /* another library's name for the gate */
    ck_assert_int_eq(apply_mem(yaml, ts, n, &err), TTT_ERR_SHAPE);
    ck_assert_msg(strstr(err.msg, "unknown input tensor 'g'") && strstr(err.msg, "log_alpha"),
                  "%s", err.msg);
    n = as_tensors(&in, ts);
    ck_assert_int_eq(apply_mem(yaml, ts + 1, n - 1, &err), TTT_ERR_SHAPE); /* no q */
    ck_assert_msg(strstr(err.msg, "missing tensor 'q'") && strstr(err.msg, "'k', 'v'"), "%s",
                  err.msg);
    /* a vector gate for the delta rule's parallel form is refused by the layer, located (the
     * chunkwise form of a vector gate is KDA's) */
    inputs vin = make_inputs(9, B, T, H, dk, dv, 1, 1, 0);
    n = as_tensors(&vin, ts);
    ck_assert_int_ne(apply_mem("layer: {preset: gated_deltanet, form: parallel}\n", ts, n, &err),
                     TTT_OK);
    ck_assert_msg(strstr(err.msg, "in.safetensors: batch 0, head 0"), "%s", err.msg);
    /* layer configuration errors pass through with their location */
    n = as_tensors(&in, ts);
    ck_assert_int_eq(apply_mem("layer: {preset: deltanett}\n", ts, n, &err), TTT_ERR_NAME);
    ck_assert_msg(strstr(err.msg, "test.yaml:1"), "%s", err.msg);
    free_inputs(&vin);
    free_inputs(&in);
}
END_TEST

START_TEST(missing_input_file) {
    ttt_error err = {0};
    ttt_cfg_node *root = NULL, *layer = load_layer("layer: {preset: deltanet}\n", &root);
    ck_assert_int_eq(ttt_apply_file(layer, "/nonexistent/in.safetensors", "/tmp/x", &err),
                     TTT_ERR_IO);
    ck_assert_msg(strstr(err.msg, "/nonexistent/in.safetensors"), "%s", err.msg);
    ttt_cfg_free(root);
}
END_TEST

static Suite *apply_suite(void) {
    Suite *s = suite_create("apply");
    TCase *tc = tcase_create("apply");
    tcase_add_test(tc, deltanet_matches_kernel_per_head);
    tcase_add_test(tc, gated_deltanet_gates_and_initial_state);
    tcase_add_test(tc, gla_vector_gate_matches_kernel_per_head);
    tcase_add_test(tc, heads_and_batches_stay_apart);
    tcase_add_test(tc, split_sequence_resumes_through_state);
    tcase_add_test(tc, several_weights_named_and_resumable);
    tcase_add_test(tc, split_carries_optimizer_state);
    tcase_add_test(tc, matches_pytorch_gated_delta_reference);
    tcase_add_test(tc, matches_pytorch_gla_reference);
    tcase_add_test(tc, empty_sequence_returns_initial_state);
    const int n_forms = (int)(sizeof forms / sizeof forms[0]);
    tcase_add_loop_test(tc, every_form_writes_all_of_its_output, 0, n_forms);
    tcase_add_loop_test(tc, each_sequence_alone_gives_the_same_bits, 0, n_forms);
    const int n_in_place = (int)(sizeof in_place / sizeof in_place[0]);
    tcase_add_loop_test(tc, in_place_kernels_equal_gathered_path, 0, n_in_place);
    tcase_add_test(tc, shape_errors_name_tensors);
    tcase_add_test(tc, missing_input_file);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(apply_suite()); }
