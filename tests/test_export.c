/* `ttt export` and `train.init_from` (docs/training.md "Exporting to PyTorch"): the names and
 * layouts of the exported file, read back with the safetensors reader and compared with the
 * checkpoint the run wrote; a round trip through init_from reproduces the trained model's
 * evaluation exactly; files that do not fit the model are refused naming the tensor; `ttt
 * logits` runs a trained model on a batch of ids and refuses what is not one. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "safetensors.h"
#include "testutil.h"

static const char *regression_yaml =
    "task: {kind: regression, dim: 2, points: 4, eval_sequences: 8, eval_batch: 8}\n"
    "model: {d_model: 8, layers: 2, heads: 2, mlp: 2}\n"
    "layer: {preset: deltanet}\n"
    "train: {steps: 3, batch: 4, log_every: 1, eval_every: 0, checkpoint_every: 0}\n";

static int run_ok(const char *fmt, const char *a, const char *b) {
    char *args, *out, *err;
    ck_assert(asprintf(&args, fmt, a, b) > 0);
    int rc = tu_run_ttt(args, &out, &err);
    ck_assert_msg(rc == 0, "ttt %s: exit %d: %s", args, rc, err);
    free(args), free(out), free(err);
    return rc;
}

/* Every exported tensor against the checkpoint's parameter of the same model: products
 * transposed to (out, in) under ".weight", vectors added to products under ".bias", the rest as
 * they are; the metadata names each layout. */
START_TEST(export_names_and_layouts) {
    char *cfg = tu_dir_write("reg.yaml", regression_yaml), *run, *exp, *ckpt;
    ck_assert(asprintf(&run, "%s/run", tu_dir) > 0);
    ck_assert(asprintf(&exp, "%s/reg.safetensors", tu_dir) > 0);
    ck_assert(asprintf(&ckpt, "%s/run/checkpoints/point0/ckpt-last.safetensors", tu_dir) > 0);
    run_ok("run %s --out %s --quiet", cfg, run);
    run_ok("export %s %s", run, exp);
    ttt_st_file *e = NULL, *c = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_st_read(exp, &e, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(ttt_st_read(ckpt, &c, &err) == TTT_OK, "%s", err.msg);
    /* name in the checkpoint, name in the export, layout: written from the model's definition
     * (src/train/seqmodel.c: x W products, biases added to them, tables and gains) */
    static const struct { const char *ttt, *exp, *layout; } want[] = {
        {"embed_in", "embed_in.weight", "linear"},
        {"embed_in.b", "embed_in.bias", "bias"},
        {"layer0.norm1", "layers.0.norm1.weight", "as_is"},
        {"layer0.mixer.wq", "layers.0.mixer.wq.weight", "linear"},
        {"layer1.mixer.wv", "layers.1.mixer.wv.weight", "linear"},
        {"layer0.mixer.conv_k", "layers.0.mixer.conv_k.weight", "as_is"},
        {"layer1.mixer.b_eta", "layers.1.mixer.b_eta.bias", "bias"},
        {"layer1.mixer.wo", "layers.1.mixer.wo.weight", "linear"},
        {"layer0.mlp.w1", "layers.0.mlp.w1.weight", "linear"},
        {"norm_f", "norm_f.weight", "as_is"},
        {"head", "head.weight", "linear"},
        {"head.b", "head.bias", "bias"},
    };
    for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
        char cname[160], key[160];
        snprintf(cname, sizeof cname, "param/%s", want[w].ttt);
        const ttt_st_tensor *src = ttt_st_find(c, cname), *dst = ttt_st_find(e, want[w].exp);
        ck_assert_msg(src && dst, "%s / %s missing", cname, want[w].exp);
        snprintf(key, sizeof key, "ttt.%s", want[w].exp);
        const char *layout = ttt_st_meta(e, key);
        ck_assert_msg(layout && strcmp(layout, want[w].layout) == 0, "%s: layout %s", key,
                      layout ? layout : "(none)");
        snprintf(key, sizeof key, "ttt.source.%s", want[w].exp);
        ck_assert_str_eq(ttt_st_meta(e, key), want[w].ttt);
        ck_assert_int_eq(src->ndim, dst->ndim);
        const int64_t n = ttt_st_numel(src);
        ck_assert_int_eq(n, ttt_st_numel(dst));
        if (strcmp(want[w].layout, "linear") == 0) {
            const int64_t r = src->shape[0], cc = src->shape[1];
            ck_assert_int_eq(dst->shape[0], cc);
            ck_assert_int_eq(dst->shape[1], r);
            for (int64_t a = 0; a < r; a++)
                for (int64_t b = 0; b < cc; b++)
                    ck_assert(dst->data[b * r + a] == src->data[a * cc + b]);
        } else {
            for (int d = 0; d < src->ndim; d++) ck_assert_int_eq(dst->shape[d], src->shape[d]);
            ck_assert(memcmp(dst->data, src->data, (size_t)n * sizeof(float)) == 0);
        }
    }
    /* one tensor per parameter, and the configuration travels with them */
    int n_params = 0;
    for (int i = 0; i < c->n; i++) n_params += strncmp(c->t[i].name, "param/", 6) == 0;
    ck_assert_int_eq(e->n, n_params);
    const char *conf = ttt_st_meta(e, "ttt.config");
    ck_assert_msg(conf && strstr(conf, "kind: regression"), "%s", conf ? conf : "(none)");
    ck_assert_str_eq(ttt_st_meta(e, "ttt.format"), "ttt-export-1");
    ttt_st_free(e);
    ttt_st_free(c);
    free(cfg), free(run), free(exp), free(ckpt);
}
END_TEST

/* The exported weights as the initial parameters of a new run whose one step changes nothing
 * (learning rate 1e-12): its evaluation is the trained run's, to the last digit; without
 * init_from it is not. */
START_TEST(init_from_reproduces_the_trained_model) {
    char *cfg = tu_dir_write("reg.yaml", regression_yaml), *run, *exp;
    ck_assert(asprintf(&run, "%s/run", tu_dir) > 0);
    ck_assert(asprintf(&exp, "%s/reg.safetensors", tu_dir) > 0);
    run_ok("run %s --out %s --quiet", cfg, run);
    run_ok("export %s %s", run, exp);
    char *text;
    ck_assert(asprintf(&text,
                       "task: {kind: regression, dim: 2, points: 4, eval_sequences: 8, "
                       "eval_batch: 8}\nmodel: {d_model: 8, layers: 2, heads: 2, mlp: 2}\n"
                       "layer: {preset: deltanet}\ntrain: {steps: 1, batch: 4, log_every: 1, "
                       "eval_every: 0, checkpoint_every: 0, lr: 1e-12, warmup: 0, "
                       "init_from: %s}\n",
                       exp) > 0);
    char *cfg2 = tu_dir_write("again.yaml", text), *run2;
    ck_assert(asprintf(&run2, "%s/again", tu_dir) > 0);
    run_ok("run %s --out %s --quiet", cfg2, run2);
    char p1[600], p2[600];
    snprintf(p1, sizeof p1, "%s/summary.csv", run);
    snprintf(p2, sizeof p2, "%s/summary.csv", run2);
    char *s1 = tu_read_file(p1), *s2 = tu_read_file(p2);
    /* the eval_loss field of each summary (header names it) */
    double l[2];
    char *sums[2] = {s1, s2};
    for (int k = 0; k < 2; k++) {
        char *hdr = strtok(sums[k], "\n"), *row = strtok(NULL, "\n");
        ck_assert(hdr && row);
        int col = 0, want = -1;
        for (char *f = hdr; f; f = strchr(f, ',') ? strchr(f, ',') + 1 : NULL, col++)
            if (strncmp(f, "eval_loss", 9) == 0 && (f[9] == ',' || f[9] == '\0')) want = col;
        ck_assert_int_ge(want, 0);
        char *f = row;
        for (int i = 0; i < want; i++) f = strchr(f, ',') + 1;
        l[k] = strtod(f, NULL);
    }
    ck_assert_msg(l[0] == l[1], "eval_loss %.9g after training, %.9g from its export", l[0], l[1]);
    free(s1), free(s2), free(text), free(cfg2), free(run2);
    /* a file for another model (d_model 16) is refused at the first tensor that does not fit */
    ck_assert(asprintf(&text,
                       "task: {kind: regression, dim: 2, points: 4, eval_sequences: 8, "
                       "eval_batch: 8}\nmodel: {d_model: 16, layers: 2, heads: 2, mlp: 2}\n"
                       "layer: {preset: deltanet}\ntrain: {steps: 1, batch: 4, log_every: 1, "
                       "eval_every: 0, checkpoint_every: 0, init_from: %s}\n",
                       exp) > 0);
    char *cfg3 = tu_dir_write("other.yaml", text), *args, *out, *err;
    ck_assert(asprintf(&args, "run %s --out %s/other --quiet", cfg3, tu_dir) > 0);
    int rc = tu_run_ttt(args, &out, &err);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "other.yaml:") && strstr(err, "train.init_from") &&
                      strstr(err, "embed_in.weight") && strstr(err, "(out, in)"),
                  "%s", err);
    free(args), free(out), free(err), free(text), free(cfg3), free(cfg), free(run), free(exp);
}
END_TEST

/* `ttt logits`: (B, T, V) for a batch; each sequence's logits are those of the sequence run
 * alone (the batch is B independent sequences); ids outside the vocabulary, other tensors and a
 * vector model are refused naming them. */
START_TEST(logits_of_a_batch) {
    char *cfg = tu_dir_write("mqar.yaml",
                             "task: {kind: mqar, vocab: 16, seq_len: 8, pairs: 2, "
                             "train_examples: 16, test_examples: 8}\n"
                             "model: {d_model: 8, layers: 1, heads: 2, mlp: 0, init_std: 0.3}\n"
                             "layer: {preset: gated_deltanet}\n"
                             "train: {steps: 2, batch: 4, log_every: 1}\n");
    char *run, *in, *in1, *out, *out1, *args, *o, *e;
    ck_assert(asprintf(&run, "%s/run", tu_dir) > 0);
    ck_assert(asprintf(&in, "%s/in.safetensors", tu_dir) > 0);
    ck_assert(asprintf(&in1, "%s/in1.safetensors", tu_dir) > 0);
    ck_assert(asprintf(&out, "%s/out.safetensors", tu_dir) > 0);
    ck_assert(asprintf(&out1, "%s/out1.safetensors", tu_dir) > 0);
    run_ok("run %s --out %s --quiet", cfg, run);
    enum { B = 3, T = 5, V = 16 };
    float ids[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (float)((7 * i + 3) % V);
    ttt_error err = {0};
    ttt_st_tensor t = {.name = "tokens", .ndim = 2, .shape = {B, T}, .data = ids};
    ck_assert(ttt_st_write(in, &t, 1, NULL, 0, &err) == TTT_OK);
    t.shape[0] = 1;
    t.data = ids + T; /* the second sequence alone */
    ck_assert(ttt_st_write(in1, &t, 1, NULL, 0, &err) == TTT_OK);
    ck_assert(asprintf(&args, "logits %s %s %s", run, in, out) > 0);
    ck_assert_int_eq(tu_run_ttt(args, &o, &e), 0);
    free(args), free(o), free(e);
    ck_assert(asprintf(&args, "logits %s %s %s", run, in1, out1) > 0);
    ck_assert_int_eq(tu_run_ttt(args, &o, &e), 0);
    free(args), free(o), free(e);
    ttt_st_file *f = NULL, *f1 = NULL;
    ck_assert_msg(ttt_st_read(out, &f, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(ttt_st_read(out1, &f1, &err) == TTT_OK, "%s", err.msg);
    const ttt_st_tensor *l = ttt_st_find(f, "logits"), *l1 = ttt_st_find(f1, "logits");
    ck_assert(l && l->ndim == 3 && l->shape[0] == B && l->shape[1] == T && l->shape[2] == V);
    ck_assert(l1 && l1->shape[0] == 1);
    float mx = 0.0f, diff = 0.0f;
    for (int i = 0; i < T * V; i++) {
        mx = fmaxf(mx, fabsf(l1->data[i]));
        diff = fmaxf(diff, fabsf(l->data[T * V + i] - l1->data[i]));
    }
    /* float32 rounding only: BLAS may block B·T rows and one sequence's T rows differently */
    ck_assert_msg(mx > 0.1f && diff <= 1e-5f * mx, "max |logit| %g, batch vs alone %g",
                  (double)mx, (double)diff);
    ttt_st_free(f), ttt_st_free(f1);
    /* an id outside the vocabulary, named by its position */
    ids[T + 2] = (float)V;
    t.shape[0] = B;
    t.data = ids;
    ck_assert(ttt_st_write(in, &t, 1, NULL, 0, &err) == TTT_OK);
    ck_assert(asprintf(&args, "logits %s %s %s", run, in, out) > 0);
    ck_assert_int_eq(tu_run_ttt(args, &o, &e), 2);
    ck_assert_msg(strstr(e, "tokens[1][2] = 16") && strstr(e, "[0, 16)"), "%s", e);
    free(args), free(o), free(e);
    /* another tensor name */
    t.name = "ids";
    ids[T + 2] = 0.0f;
    ck_assert(ttt_st_write(in, &t, 1, NULL, 0, &err) == TTT_OK);
    ck_assert(asprintf(&args, "logits %s %s %s", run, in, out) > 0);
    ck_assert_int_ne(tu_run_ttt(args, &o, &e), 0);
    ck_assert_msg(strstr(e, "one tensor 'tokens'") && strstr(e, "missing"), "%s", e);
    free(args), free(o), free(e);
    /* a vector model has no logits */
    char *rcfg = tu_dir_write("reg.yaml", regression_yaml), *rrun;
    ck_assert(asprintf(&rrun, "%s/reg", tu_dir) > 0);
    run_ok("run %s --out %s --quiet", rcfg, rrun);
    t.name = "tokens";
    ck_assert(ttt_st_write(in, &t, 1, NULL, 0, &err) == TTT_OK);
    ck_assert(asprintf(&args, "logits %s %s %s", rrun, in, out) > 0);
    ck_assert_int_ne(tu_run_ttt(args, &o, &e), 0);
    ck_assert_msg(strstr(e, "reads vectors"), "%s", e);
    free(args), free(o), free(e);
    free(cfg), free(run), free(in), free(in1), free(out), free(out1), free(rcfg), free(rrun);
}
END_TEST

static Suite *export_suite(void) {
    Suite *s = suite_create("export");
    TCase *tc = tcase_create("export");
    tcase_add_checked_fixture(tc, tu_dir_setup, tu_dir_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, export_names_and_layouts);
    tcase_add_test(tc, init_from_reproduces_the_trained_model);
    tcase_add_test(tc, logits_of_a_batch);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(export_suite()); }
