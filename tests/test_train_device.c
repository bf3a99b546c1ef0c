/* train.device and train.dtype (docs/training.md "Device and precision"): parsed once into typed
 * values, each bad value refused with its location and what was expected, a CUDA device this
 * process cannot use refused when the plan is built (`ttt check`), bfloat16 on the host refused,
 * `ttt check`'s line per trained point, the step's memory estimate on each device, and the one
 * refusal of training on a device that `ttt run` and ttt_train share. Every refusal has a control:
 * a valid configuration that is accepted. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "cuda_kernels.h"
#include "device.h"
#include "form.h"
#include "mixer.h"
#include "plan.h"
#include "task.h"
#include "testutil.h"
#include "train.h"
#include "trained.h"

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* A tiny MQAR experiment; `train` is the text of its train: mapping's extra keys. */
static char *experiment(const char *train) {
    char *s;
    ck_assert(asprintf(&s,
                       "name: dev\n"
                       "task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2, train_examples: 32,\n"
                       "       test_examples: 8, eval_batch: 8}\n"
                       "model: {d_model: 16, layers: 1, heads: 1}\n"
                       "train:\n"
                       "  steps: 2\n"
                       "  batch: 4\n"
                       "%s",
                       train) > 0);
    return s;
}

static int gpus(void) {
    ttt_error e = {0};
    return ttt_cuda_device_count(&e);
}

/* `ttt ARGS` on the experiment with train: keys `train`, in tu_dir; exit status, out, err. */
static int ttt_on(const char *cmd, const char *train, const char *more, char **out, char **err) {
    char *text = experiment(train);
    char *path = tu_dir_write("dev.yaml", text);
    char *args;
    ck_assert(asprintf(&args, "%s %s --out %s/run %s", cmd, path, tu_dir, more ? more : "") > 0);
    if (strcmp(cmd, "check") == 0) { /* check takes no --out */
        free(args);
        ck_assert(asprintf(&args, "check %s %s", path, more ? more : "") > 0);
    }
    const int rc = tu_run_ttt(args, out, err);
    free(text), free(path), free(args);
    return rc;
}

/* Refused by `ttt run` with exit 2, the message holding want1 and want2, nothing written. */
static void refused(const char *train, const char *more, const char *want1, const char *want2) {
    char *out = NULL, *err = NULL;
    const int rc = ttt_on("run", train, more, &out, &err);
    ck_assert_msg(rc == 2, "exit %d for '%s': %s", rc, train, err ? err : "");
    ck_assert_msg(err && strstr(err, want1), "wanted '%s' in: %s", want1, err ? err : "");
    if (want2) ck_assert_msg(strstr(err, want2), "wanted '%s' in: %s", want2, err);
    char p[4096];
    snprintf(p, sizeof p, "%s/run", tu_dir);
    ck_assert_msg(!exists(p), "a run folder was written for '%s'", train);
    free(out), free(err);
}

/* ---- parsing ---- */

START_TEST(the_device_text_parses_into_a_device) {
    static const struct {
        const char *text;
        int ok, kind, index;
    } cases[] = {
        {"cpu", 1, TTT_DEVICE_HOST, 0},   {"cuda", 1, TTT_DEVICE_CUDA, 0},
        {"cuda:0", 1, TTT_DEVICE_CUDA, 0}, {"cuda:3", 1, TTT_DEVICE_CUDA, 3},
        {"cuda:63", 1, TTT_DEVICE_CUDA, 63},
        /* refused: none of the three forms */
        {"cuda:64", 0, 0, 0}, {"cuda:", 0, 0, 0}, {"cuda:1x", 0, 0, 0}, {"cuda:-1", 0, 0, 0},
        {"CUDA", 0, 0, 0},   {"gpu", 0, 0, 0},    {"host", 0, 0, 0},    {" cuda", 0, 0, 0},
        {"cuda0", 0, 0, 0},  {"", 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ttt_device d = {TTT_DEVICE_CUDA, 99};
        const int ok = ttt_train_parse_device(cases[i].text, &d);
        ck_assert_msg(ok == cases[i].ok, "'%s': %d", cases[i].text, ok);
        if (!ok) continue;
        ck_assert_int_eq(d.kind, cases[i].kind);
        ck_assert_int_eq(d.index, cases[i].index);
    }
}
END_TEST

/* train.devices' text: a count, ranges and lists, repeats kept in order; and what is refused,
 * each with a phrase saying why. */
START_TEST(the_devices_text_parses_into_ranks) {
    static const struct {
        const char *text;
        int n;
        int idx[6];
    } good[] = {
        {"1", 1, {0}},           {"4", 4, {0, 1, 2, 3}},         {"cuda:2", 1, {2}},
        {"cuda", 1, {0}},        {"cuda:1-3", 3, {1, 2, 3}},     {"cuda:0,cuda:0", 2, {0, 0}},
        {"cuda:0-1, cuda:1", 3, {0, 1, 1}}, {"cuda:3,cuda:1", 2, {3, 1}},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        ttt_device d[TTT_MAX_TRAIN_DEVICES];
        int n = -1;
        char why[160] = "";
        ck_assert_msg(ttt_train_parse_devices(good[i].text, d, TTT_MAX_TRAIN_DEVICES, &n, why,
                                              sizeof why),
                      "'%s': %s", good[i].text, why);
        ck_assert_int_eq(n, good[i].n);
        for (int k = 0; k < n; k++) {
            ck_assert_int_eq(d[k].kind, TTT_DEVICE_CUDA);
            ck_assert_int_eq(d[k].index, good[i].idx[k]);
        }
    }
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"0", "0 GPUs: expected 1 to 64"},
        {"65", "65 GPUs: expected 1 to 64"},
        {"cpu", "'cpu' is not a GPU"},
        {"tpu:0", "'tpu:0' is not a GPU"},
        {"cuda:3-1", "'cuda:3-1' is not a range"},
        {"cuda:0,,cuda:1", "an empty entry"},
        {"cuda:0-63,cuda:0", "more than 64 ranks"},
        {"", "no device"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ttt_device d[TTT_MAX_TRAIN_DEVICES];
        int n = 0;
        char why[160] = "";
        ck_assert_msg(!ttt_train_parse_devices(bad[i].text, d, TTT_MAX_TRAIN_DEVICES, &n, why,
                                               sizeof why),
                      "'%s' accepted", bad[i].text);
        ck_assert_msg(strstr(why, bad[i].why), "'%s': wanted '%s' in '%s'", bad[i].text,
                      bad[i].why, why);
    }
}
END_TEST

/* The train: mapping alone: without the keys the config is the host in float32 and the tree
 * gains neither key; with them given as cpu and float32 it reads the same and keeps them as
 * written. */
START_TEST(parse_reads_typed_values_and_writes_no_default) {
    const char *texts[] = {"train: {steps: 3}\n",
                           "train: {steps: 3, device: cpu, dtype: float32}\n"};
    for (int k = 0; k < 2; k++) {
        ttt_error err = {0};
        ttt_cfg_node *root = NULL;
        ck_assert_int_eq(ttt_cfg_load_string(texts[k], "t.yaml", &root, &err), TTT_OK);
        ttt_cfg_node *map = (ttt_cfg_node *)ttt_cfg_get(root, "train");
        ttt_train_config c;
        ck_assert_msg(ttt_train_config_parse(map, &c, &err) == TTT_OK, "%s", err.msg);
        ck_assert(ttt_device_is_host(c.device));
        ck_assert_int_eq(c.dtype, TTT_DTYPE_F32);
        ck_assert_int_eq(ttt_cfg_get(map, "device") != NULL, k);
        ck_assert_int_eq(ttt_cfg_get(map, "dtype") != NULL, k);
        ck_assert(ttt_cfg_get(map, "lr") != NULL); /* the other defaults are filled in */
        ck_assert_str_eq(c.device_where, k ? "t.yaml:1:27" : "");
        ck_assert_int_eq(ttt_train_device_ready(&c, NULL, &err), TTT_OK);
        ttt_cfg_free(root);
    }
}
END_TEST

/* ---- located errors, each with its control ---- */

START_TEST(bad_device_values_are_located) {
    refused("  device: gpu\n", "", "dev.yaml:8:11", "unknown device 'gpu'");
    refused("  device: cdua\n", "", "dev.yaml:8:11", "did you mean 'cuda'");
    refused("  device: cuda:64\n", "", "dev.yaml:8:11",
            "cuda:N with N a device number from 0 to 63");
    refused("  device: cuda:-1\n", "", "dev.yaml:8:11", "unknown device 'cuda:-1'");
    refused("  device: [cuda]\n", "", "dev.yaml:8:11",
            "train.device: expected a string, got a list");
    refused("  device:\n", "", "dev.yaml:8:10", "train.device: the value is empty");
    refused("", "--set train.device=tpu", "--set train.device=tpu", "unknown device 'tpu'");
    refused("  dtype: float16\n", "", "dev.yaml:8:10", "did you mean 'bfloat16'");
    refused("  devise: cpu\n", "", "dev.yaml:8:3", "did you mean 'device'");
    refused("  devices: cuda:2-1\n", "", "dev.yaml:8:12", "'cuda:2-1' is not a range");
    refused("  devices: cpu\n", "", "dev.yaml:8:12", "'cpu' is not a GPU");
    refused("  devices: 0\n", "", "dev.yaml:8:12", "0 GPUs: expected 1 to 64");
    refused("  devices: [cuda:0]\n", "", "dev.yaml:8:12", "train.devices: expected a string");
    /* more ranks than sequences in a batch (4): refused whether or not the GPUs exist */
    refused("  devices: 'cuda:0,cuda:0,cuda:0,cuda:0,cuda:0'\n", "", "dev.yaml:8:12",
            "5 ranks but train.batch is 4");
    /* GPUs this process cannot use (none here, or fewer than 64 on a GPU machine) */
    refused("  devices: cuda:63\n", "", "dev.yaml:8:12", "train.devices: ");
    /* bfloat16 with train.devices (and no train.device) is the GPUs' mixed precision: refused
     * here for the device alone, never as bfloat16 on the host */
    refused("  devices: cuda:63\n  dtype: bfloat16\n", "", "dev.yaml:8:12", "train.devices: ");
    /* control: the same file with valid values is accepted */
    char *out = NULL, *err = NULL;
    int rc = ttt_on("check", "  device: cpu\n  dtype: float32\n", "", &out, &err);
    ck_assert_msg(rc == 0, "%s", err);
    free(out), free(err);
    rc = ttt_on("check", "", "--set train.device=cpu", &out, &err);
    ck_assert_msg(rc == 0, "%s", err);
    free(out), free(err);
}
END_TEST

START_TEST(bfloat16_on_the_host_is_refused) {
    const char *want = "train.dtype: bfloat16 needs train.device: cuda";
    refused("  dtype: bfloat16\n", "", "dev.yaml:8:10", want);
    refused("  device: cpu\n  dtype: bfloat16\n", "", "dev.yaml:9:10", want);
    refused("", "--set train.dtype=bfloat16", "--set train.dtype=bfloat16", want);
    /* control: float32 on the host */
    char *out = NULL, *err = NULL;
    const int rc = ttt_on("check", "  dtype: float32\n", "", &out, &err);
    ck_assert_msg(rc == 0, "%s", err);
    free(out), free(err);
}
END_TEST

/* Without a usable GPU (this build without CUDA, or no device), cuda is refused when the plan
 * is built, naming the option, its place and the seam's reason; cuda:N past the device count
 * everywhere. On a GPU machine cuda:0 passes the check, which then asks what `ttt run` asks of
 * the point's mixer or layer (below, ttt_plan_devices_ready). */
START_TEST(cuda_without_a_gpu_is_refused_at_check) {
    const int n = gpus();
    if (n == 0) {
        refused("  device: cuda\n", "", "dev.yaml:8:11", "train.device: cuda:0 requested, but");
        refused("  device: cuda:0\n", "", "dev.yaml:8:11", "this process cannot train on it");
        char *out = NULL, *err = NULL;
        const int rc = ttt_on("check", "  device: cuda\n", "", &out, &err);
        ck_assert_int_eq(rc, 2);
        ttt_error e = {0};
        ttt_cuda_device_count(&e); /* the seam's own reason is in the message */
        ck_assert_msg(strstr(err, e.msg), "wanted '%s' in: %s", e.msg, err);
        free(out), free(err);
    }
    char dev[64];
    snprintf(dev, sizeof dev, "  device: cuda:%d\n", n < 63 ? (n > 0 ? n : 1) : 63);
    if (n < 63) refused(dev, "", "dev.yaml:8:11", "requested");
    /* control: the host is accepted on every machine */
    char *out = NULL, *err = NULL;
    const int rc = ttt_on("check", "  device: cpu\n", "", &out, &err);
    ck_assert_msg(rc == 0, "%s", err);
    free(out), free(err);
}
END_TEST

/* ---- ttt check's report ---- */

START_TEST(check_reports_device_dtype_and_memory) {
    char *out = NULL, *err = NULL;
    int rc = ttt_on("check", "", "", &out, &err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_msg(strstr(err, "point 0, train.device cpu, train.dtype float32: host memory of a "
                              "training step "),
                  "%s", err);
    ck_assert_msg(strstr(err, "parameters, gradients and AdamW state") &&
                      strstr(err, "activations and tape") && strstr(err, "arena blocks"),
                  "%s", err);
    /* the resolved configuration on stdout gains neither key */
    ck_assert_msg(!strstr(out, "device:") && !strstr(out, "dtype:"), "%s", out);
    free(out), free(err);
    /* given, they show as written */
    rc = ttt_on("check", "  device: cpu\n  dtype: float32\n", "", &out, &err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_msg(strstr(out, "device: cpu") && strstr(out, "dtype: float32"), "%s", out);
    free(out), free(err);
    if (gpus() > 0) { /* on a GPU machine: the device's line */
        rc = ttt_on("check", "  device: cuda\n  dtype: bfloat16\n", "", &out, &err);
        ck_assert_msg(rc == 0, "%s", err);
        ck_assert_msg(strstr(err, "point 0, train.device cuda:0, train.dtype bfloat16: device "
                                  "memory of a training step ") &&
                          strstr(err, "their bf16 copy") && strstr(err, "bf16 operands"),
                      "%s", err);
        free(out), free(err);
    }
}
END_TEST

/* The defaults written out hash as their absence, and cuda as cuda:0, so a run that names them
 * continues one that did not; another dtype is another configuration. */
START_TEST(the_hash_counts_what_the_values_mean) {
    const char *const variants[] = {"", "  device: cpu\n", "  dtype: float32\n",
                                    "  device: cpu\n  dtype: float32\n"};
    char first[17] = "";
    for (int i = 0; i < 4; i++) {
        char *text = experiment(variants[i]);
        ttt_error err = {0};
        ttt_cfg_node *doc = NULL;
        ck_assert_int_eq(ttt_cfg_load_string(text, "dev.yaml", &doc, &err), TTT_OK);
        ttt_plan *p = NULL;
        ck_assert_msg(ttt_plan_build(doc, "dev", &p, &err) == TTT_OK, "%s", err.msg);
        if (i == 0) snprintf(first, sizeof first, "%s", p->points[0].config_hash);
        ck_assert_str_eq(p->points[0].config_hash, first);
        ttt_plan_free(p);
        ttt_cfg_free(doc);
        free(text);
    }
    /* control: another configuration hashes otherwise */
    char *text = experiment("  lr: 0.002\n");
    ttt_error err = {0};
    ttt_cfg_node *doc = NULL;
    ck_assert_int_eq(ttt_cfg_load_string(text, "dev.yaml", &doc, &err), TTT_OK);
    ttt_plan *p = NULL;
    ck_assert_msg(ttt_plan_build(doc, "dev", &p, &err) == TTT_OK, "%s", err.msg);
    ck_assert_str_ne(p->points[0].config_hash, first);
    ttt_plan_free(p);
    ttt_cfg_free(doc);
    free(text);
}
END_TEST

/* ---- memory estimate ---- */

START_TEST(the_estimate_counts_the_same_terms_on_each_device) {
    char *text = experiment("");
    ttt_error err = {0};
    ttt_cfg_node *doc = NULL;
    ck_assert_int_eq(ttt_cfg_load_string(text, "dev.yaml", &doc, &err), TTT_OK);
    ttt_plan *p = NULL;
    ck_assert_msg(ttt_plan_build(doc, "dev", &p, &err) == TTT_OK, "%s", err.msg);
    const ttt_trained_cfg *tc = p->points[0].task->trained(p->points[0].cfg);
    const double P = ttt_seq_model_param_bound(&tc->model);
    const int T = 16; /* the task's seq_len */
    ttt_train_config c = tc->train;
    ttt_train_estimate host, f32, bf16;
    ttt_trained_estimate(&tc->model, &c, T, &host);
    /* the plan's estimate is this one */
    ck_assert(host.total == tc->memory.total && host.total > 0);
    ck_assert(host.total == host.params + host.step + host.other);
    ck_assert(host.params == 16.0 * P);
    ck_assert(host.other > 0); /* the arenas' blocks */
    c.device = ttt_device_cuda(0);
    ttt_trained_estimate(&tc->model, &c, T, &f32);
    c.dtype = TTT_DTYPE_BF16;
    ttt_trained_estimate(&tc->model, &c, T, &bf16);
    /* fp32 master weights, one gradient, two moments; a bf16 copy of the weights under bf16 */
    ck_assert(f32.params == 16.0 * P && bf16.params == 18.0 * P);
    /* the step in float32 is the host's, under either dtype (the tape keeps fp32 tensors); the
     * bf16 operands of one product are the other term: three of the widest of the q|k|v
     * projection (3·d_model), the MLP's hidden layer (mlp·d_model) and the logits (vocab), each
     * batch × T rows of 2 bytes */
    ck_assert(f32.step == host.step && bf16.step == f32.step);
    ck_assert(f32.other == 0);
    const ttt_seq_model_config *mc = &tc->model;
    double widest = 3.0 * mc->d_model;
    if ((double)mc->mlp * mc->d_model > widest) widest = (double)mc->mlp * mc->d_model;
    if (mc->io.vocab > widest) widest = mc->io.vocab;
    ck_assert(widest >= 3.0 * mc->d_model && widest > 0);
    ck_assert(bf16.other == 2.0 * 3.0 * c.batch * T * widest);
    ck_assert(f32.total == f32.params + f32.step &&
              bf16.total == bf16.params + bf16.step + bf16.other);
    ttt_plan_free(p);
    ttt_cfg_free(doc);
    free(text);
}
END_TEST

/* ---- the one place that decides what trains on a device ---- */

/* The model config of `layer` (a `layer:` line) for a token task. */
static void model_of(const char *layer, ttt_seq_model_config *mc, ttt_cfg_node **root) {
    char text[512];
    snprintf(text, sizeof text, "model: {d_model: 16, heads: 2, layers: 1}\n%s", layer);
    ttt_error err = {0};
    ck_assert_int_eq(ttt_cfg_load_string(text, "m.yaml", root, &err), TTT_OK);
    ttt_seq_model_io io = {.vocab = 16, .seq_len = 16};
    ck_assert_msg(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(*root, "model"),
                                      (ttt_cfg_node *)ttt_cfg_get(*root, "layer"), &io, mc,
                                      &err) == TTT_OK,
                  "%s", err.msg);
}

/* ttt_train_device_ready decides what trains on a device: the host in float32 (bfloat16 there is
 * refused, as in a file); cuda:N in float32 or bfloat16 for the softmax, fox, lru, mamba and
 * rwkv7 mixers and for ttt mixers whose layer has a CUDA form; the path mixer and layers
 * without a CUDA form are refused with the option, where it was given and what does not run there. ttt_train refuses before it touches the model or the
 * data (both NULL here), and `ttt run` (ttt_plan_run) before it writes the folder. The plan's
 * typed value is set to cuda:0 by hand: on a machine without a GPU the plan itself refuses it
 * (above). */
START_TEST(training_on_a_device_is_refused_in_one_place) {
    ttt_train_config c;
    memset(&c, 0, sizeof c);
    ttt_error err = {0};
    ck_assert_int_eq(ttt_train_device_ready(&c, NULL, &err), TTT_OK); /* control: the host */
    snprintf(c.device_where, sizeof c.device_where, "x.yaml:4:11");
    /* bfloat16 on the host, in a configuration made in code, is refused as in a file */
    c.dtype = TTT_DTYPE_BF16;
    ck_assert_int_eq(ttt_train_device_ready(&c, NULL, &err), TTT_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "x.yaml:4:11: train.dtype: bfloat16 needs train.device: cuda"),
                  "%s", err.msg);
    ttt_train_result res;
    err = (ttt_error){0};
    ck_assert_int_eq(ttt_train(NULL, &c, NULL, NULL, &res, &err), TTT_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "bfloat16 needs train.device: cuda"), "%s", err.msg);
    ck_assert_int_eq(res.step, 0);
    /* on a device both dtypes pass (bfloat16: mixed precision) */
    c.device = ttt_device_cuda(0);
    ck_assert_int_eq(ttt_train_device_ready(&c, NULL, &err), TTT_OK);
    c.dtype = TTT_DTYPE_F32;
    ck_assert_int_eq(ttt_train_device_ready(&c, NULL, &err), TTT_OK);

    /* the mixers: softmax, fox, lru, mamba and rwkv7 run; a layer without a CUDA form is
     * refused, naming it */
    static const struct {
        const char *layer, *refusal; /* NULL: runs on a device (in a build with CUDA) */
    } mixers[] = {
        {"layer: {mixer: softmax}\n", NULL},
        {"layer: {preset: deltanet}\n", NULL},
        {"layer: {preset: gated_deltanet}\n", NULL},
        {"layer: {preset: gla}\n", NULL},
        {"layer: {preset: retnet}\n", NULL}, /* its RoPE turned by the block (mixers/ttt.c) */
        {"layer: {preset: mamba2}\n", NULL},
        {"layer: {preset: linear_attention}\n", "take no output normalization or feature map"},
        {"layer: {mixer: fox}\n", NULL},
        {"layer: {mixer: lru}\n", NULL},
        {"layer: {mixer: mamba}\n", NULL}, /* the recurrences: docs/device_ops.md */
        {"layer: {mixer: rwkv7}\n", NULL},
        {"layer: {preset: ttt_linear}\n", "has no CUDA form"},
        {"layer: {preset: deltaproduct}\n", "steps_per_token = 2 has no CUDA form"},
        {"layer: {mixer: path}\n",
         "Householder-product scores (src/train/mixers/path.c) have no CUDA form"},
    };
    for (size_t i = 0; i < sizeof mixers / sizeof mixers[0]; i++) {
        ttt_seq_model_config mc;
        ttt_cfg_node *root = NULL;
        model_of(mixers[i].layer, &mc, &root);
        err = (ttt_error){0};
        const ttt_status s = ttt_train_device_ready(&c, &mc, &err);
        if (mixers[i].refusal) {
            /* without CUDA every layer lacks a CUDA form, whatever else it lacks */
            const char *want = ttt_device_cuda_built() ? mixers[i].refusal : "no CUDA form";
            ck_assert_msg(s == TTT_ERR_UNSUPPORTED && strstr(err.msg, want) &&
                              strstr(err.msg, "x.yaml:4:11: train.device: cuda:0: model.mixer"),
                          "%s: %s", mixers[i].layer, err.msg);
        } else if (ttt_device_cuda_built()) {
            ck_assert_msg(s == TTT_OK, "%s: %s", mixers[i].layer, err.msg);
        } else { /* without CUDA no layer has a CUDA form; softmax still passes this check */
            ck_assert(s == TTT_OK || strstr(err.msg, "has no CUDA form"));
        }
        /* the form the reports name for a TTT layer on the device (the mixer's device_form):
         * a CUDA entry's where the layer runs there, none where it is refused */
        const ttt_mixer *mx = ttt_mixer_at(mc.mixer);
        if (mx->uses_layer) {
            ck_assert_ptr_nonnull(mx->device_form);
            const char *f = mx->device_form(&mc);
            if (mixers[i].refusal || !ttt_device_cuda_built()) {
                ck_assert_msg(f == NULL, "%s: device form %s", mixers[i].layer, f);
            } else {
                int cuda = 0;
                for (int e = 0; f && e < ttt_form_count(); e++)
                    cuda |= ttt_form_at(e)->device == TTT_DEVICE_CUDA &&
                            strcmp(ttt_form_at(e)->form, f) == 0;
                ck_assert_msg(cuda, "%s: device form %s is no CUDA entry's", mixers[i].layer,
                              f ? f : "(none)");
            }
        }
        c.device = ttt_device_host(); /* control: every mixer on the host */
        ck_assert_int_eq(ttt_train_device_ready(&c, &mc, &err), TTT_OK);
        c.device = ttt_device_cuda(0);
        ttt_cfg_free(root);
    }
    /* what is still refused of the mixers that run: RWKV-7 heads wider than the DPLR
     * backward's shared row (control: the width it takes) */
    {
        ttt_seq_model_config mc;
        ttt_cfg_node *root = NULL;
        model_of("layer: {mixer: rwkv7}\n", &mc, &root);
        mc.head_dim = TTT_CUDA_DPLR_MAX_DV + 1;
        err = (ttt_error){0};
        ck_assert_int_eq(ttt_train_device_ready(&c, &mc, &err), TTT_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(err.msg, "model.head_dim = 12289: the DPLR recurrence's CUDA "
                                      "backward takes heads of at most 12288 columns"),
                      "%s", err.msg);
        mc.head_dim = TTT_CUDA_DPLR_MAX_DV;
        ck_assert_int_eq(ttt_train_device_ready(&c, &mc, &err), TTT_OK);
        ttt_cfg_free(root);
    }

    char *text = experiment("");
    ttt_cfg_node *doc = NULL;
    ck_assert_int_eq(ttt_cfg_load_string(text, "dev.yaml", &doc, &err), TTT_OK);
    ttt_plan *p = NULL;
    ck_assert_msg(ttt_plan_build(doc, "dev", &p, &err) == TTT_OK, "%s", err.msg);
    ttt_trained_cfg *tc = (ttt_trained_cfg *)p->points[0].task->trained(p->points[0].cfg);
    tc->train.device = ttt_device_host();
    tc->train.dtype = TTT_DTYPE_BF16;
    char out[4096];
    snprintf(out, sizeof out, "%s/run", tu_dir);
    err = (ttt_error){0};
    ck_assert_int_eq(ttt_plan_run(p, out, 0, NULL, &err), TTT_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "train.dtype: bfloat16 needs train.device: cuda"), "%s",
                  err.msg);
    ck_assert_msg(!exists(out), "the run folder was written");
    /* control: the same plan on the host runs */
    tc->train.device = ttt_device_host();
    tc->train.dtype = TTT_DTYPE_F32;
    ck_assert_msg(ttt_plan_run(p, out, 0, NULL, &err) == TTT_OK, "%s", err.msg);
    ck_assert(exists(out));
    ttt_plan_free(p);
    ttt_cfg_free(doc);
    free(text);

    /* `ttt check` asks the same of every point (ttt_plan_devices_ready): the path mixer on
     * cuda:0 (set by hand, as above) is refused with its reason and its point; on the host it
     * passes (control) */
    char *base = experiment(""), *path_text;
    ck_assert(asprintf(&path_text, "%slayer: {mixer: path}\n", base) > 0);
    free(base);
    ck_assert_int_eq(ttt_cfg_load_string(path_text, "dev.yaml", &doc, &err), TTT_OK);
    ck_assert_msg(ttt_plan_build(doc, "dev", &p, &err) == TTT_OK, "%s", err.msg);
    tc = (ttt_trained_cfg *)p->points[0].task->trained(p->points[0].cfg);
    ck_assert_int_eq(ttt_plan_devices_ready(p, &err), TTT_OK);
    tc->train.device = ttt_device_cuda(0);
    err = (ttt_error){0};
    ck_assert_int_eq(ttt_plan_devices_ready(p, &err), TTT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "model.mixer path does not run on a CUDA device: PaTH "
                                  "attention's Householder-product scores"),
                  "%s", err.msg);
    ttt_plan_free(p);
    ttt_cfg_free(doc);
    free(path_text);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("train_device");
    TCase *c = tcase_create("train_device");
    tcase_add_checked_fixture(c, tu_dir_setup, tu_dir_teardown);
    tcase_set_timeout(c, 300);
    tcase_add_test(c, the_device_text_parses_into_a_device);
    tcase_add_test(c, the_devices_text_parses_into_ranks);
    tcase_add_test(c, parse_reads_typed_values_and_writes_no_default);
    tcase_add_test(c, bad_device_values_are_located);
    tcase_add_test(c, bfloat16_on_the_host_is_refused);
    tcase_add_test(c, cuda_without_a_gpu_is_refused_at_check);
    tcase_add_test(c, check_reports_device_dtype_and_memory);
    tcase_add_test(c, the_hash_counts_what_the_values_mean);
    tcase_add_test(c, the_estimate_counts_the_same_terms_on_each_device);
    tcase_add_test(c, training_on_a_device_is_refused_in_one_place);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return tu_run(suite()); }
