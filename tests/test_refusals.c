/* Inputs that used to be accepted silently or misreported, each now refused with a message
 * (docs/hardening.md "Bad input: the classes of error and their guarantees"), and memory
 * estimates that count the embedding, the optimizer state and the evaluation sets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "safetensors.h"
#include "testutil.h"

/* `ttt ARGS` where FILE in args is replaced by a file holding `yaml`; returns the exit code and
 * the stderr text (malloc'd). */
static int check_yaml(const char *yaml, const char *extra, char **err) {
    char *dir = tu_mkdtemp();
    char path[512], args[1024];
    snprintf(path, sizeof path, "%s/exp.yaml", dir);
    ck_assert_int_eq(tu_write_file(path, yaml), 0);
    snprintf(args, sizeof args, "check %s %s", path, extra ? extra : "");
    int code = tu_run_ttt(args, NULL, err);
    tu_rmtree(dir);
    free(dir);
    return code;
}

/* `ttt check` refuses: exit `code` (2 bad input, 1 too large for this machine) and `want` in the
 * message. */
static void expect_exit(const char *yaml, const char *extra, int want_code, const char *want) {
    char *err = NULL;
    int code = check_yaml(yaml, extra, &err);
    ck_assert_msg(code == want_code && err && strstr(err, want),
                  "%s%s: exit %d, '%s'; expected '%s'", yaml, extra ? extra : "", code,
                  err ? err : "", want);
    free(err);
}

static void expect_refusal(const char *yaml, const char *extra, const char *want) {
    expect_exit(yaml, extra, 2, want);
}

START_TEST(an_empty_list_is_refused) {
    expect_refusal("task: {kind: memory, pairs: [], key_dim: 8}\n", NULL,
                   "task.pairs: the list is empty; expected at least one value");
    expect_refusal("task: {kind: memory, key_dim: 8}\n", "--set task.pairs=[]",
                   "the list is empty");
    expect_refusal("task: {kind: benchmark, tokens: []}\n", NULL, "task.tokens: the list is empty");
}
END_TEST

START_TEST(a_null_value_is_refused) {
    expect_refusal("task: {kind: memory, key_dim: }\n", NULL,
                   "task.key_dim: the value is empty (null); expected an integer");
    expect_refusal("seed: ~\ntask: {kind: memory}\n", NULL, "seed: the value is empty (null)");
    expect_refusal("task: {kind: memory}\nlayer:\n  optimizer: {name: sgd, lr: null}\n", NULL,
                   "leave the key out for the default");
    /* an empty section is all its defaults, as documented */
    char *err = NULL;
    ck_assert_int_eq(check_yaml("task: {kind: memory, pairs: [4], key_dim: 8}\nlayer:\n", NULL,
                                &err),
                     0);
    free(err);
}
END_TEST

START_TEST(tags_are_refused_like_quoted_numbers) {
    expect_refusal("task: {kind: memory, key_dim: !!str 16}\n", NULL,
                   "task.key_dim: the tag 'tag:yaml.org,2002:str' is not supported");
    expect_refusal("task: {kind: memory, key_dim: !!int 16}\n", NULL, "is not supported");
    expect_refusal("name: !mine x\ntask: {kind: memory}\n", NULL, "name: the tag '!mine'");
    expect_refusal("task: !!map {kind: memory}\n", NULL, "task: the tag");
    expect_refusal("task: {kind: memory, key_dim: \"16\"}\n", NULL,
                   "task.key_dim: expected an integer");
}
END_TEST

START_TEST(a_too_small_integer_is_called_too_small) {
    expect_refusal("task: {kind: memory}\n", "--set task.key_dim=-99999999999999999999999",
                   "-99999999999999999999999 is too small; expected an integer from");
    expect_refusal("task: {kind: memory}\n", "--set task.key_dim=99999999999999999999999",
                   "99999999999999999999999 is too large; expected an integer from");
    expect_refusal("task: {kind: memory}\nlayer: {optimizer: {name: sgd, lr: -1e999}}\n", NULL,
                   "-1e999 is too large in magnitude (negative)");
}
END_TEST

/* A header: 8-byte little-endian length, then the JSON text as given. */
static ttt_status read_header(const char *json, ttt_error *err) {
    const size_t n = strlen(json);
    unsigned char *buf = calloc(8 + n + 16, 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, json, n);
    ttt_st_file *f = NULL;
    ttt_status s = ttt_st_read_mem(buf, 8 + n + 16, "x.safetensors", &f, err);
    ttt_st_free(f);
    free(buf);
    return s;
}

START_TEST(safetensors_empty_names_and_tab_padding_are_refused) {
    ttt_error err = {0};
    const char *good = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    char padded[256];
    snprintf(padded, sizeof padded, "%s    ", good);
    ck_assert_int_eq(read_header(padded, &err), TTT_OK);
    snprintf(padded, sizeof padded, "%s  \t ", good);
    ck_assert_int_eq(read_header(padded, &err), TTT_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "may only be padded with spaces"), "%s", err.msg);
    snprintf(padded, sizeof padded, "%s\n", good);
    ck_assert_int_eq(read_header(padded, &err), TTT_ERR_FORMAT);
    ck_assert_int_eq(
        read_header("{\"\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", &err),
        TTT_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "a tensor has an empty name"), "%s", err.msg);
}
END_TEST

/* (B, T, H, d) inputs of T = 0, with a per-key gate when `gate`. */
static void write_empty_inputs(const char *path, int gate) {
    ttt_st_tensor t[4] = {
        {.name = "q", .ndim = 4, .shape = {2, 0, 2, 4}},
        {.name = "k", .ndim = 4, .shape = {2, 0, 2, 4}},
        {.name = "v", .ndim = 4, .shape = {2, 0, 2, 3}},
        {.name = "log_alpha", .ndim = 4, .shape = {2, 0, 2, 4}},
    };
    ttt_error err = {0};
    ck_assert_msg(ttt_st_write(path, t, gate ? 4 : 3, NULL, 0, &err) == TTT_OK, "%s", err.msg);
}

START_TEST(apply_refuses_its_input_as_output_and_a_sweep) {
    char *dir = tu_mkdtemp();
    char in[512], in2[600], layer[512], swept[512], out[512], args[2048];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(in2, sizeof in2, "%s/./in.safetensors", dir);
    snprintf(layer, sizeof layer, "%s/layer.yaml", dir);
    snprintf(swept, sizeof swept, "%s/swept.yaml", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    write_empty_inputs(in, 0);
    char *before = tu_read_file(in);
    ck_assert_int_eq(tu_write_file(layer, "layer: {preset: deltanet}\n"), 0);
    ck_assert_int_eq(tu_write_file(swept, "layer: {preset: gla}\nsweep: {layer.chunk: [8, 16]}\n"),
                     0);
    const char *same[] = {in, in2};
    for (int i = 0; i < 2; i++) {
        char *err = NULL;
        snprintf(args, sizeof args, "apply %s %s %s", layer, in, same[i]);
        int code = tu_run_ttt(args, NULL, &err);
        ck_assert_msg(code == 2 && err && strstr(err, "is the input '"), "exit %d: %s", code,
                      err ? err : "");
        free(err);
    }
    char *after = tu_read_file(in);
    ck_assert_mem_eq(before, after, 8); /* the header length and so the file are unchanged */
    ck_assert_str_eq(before + 8, after + 8);
    char *err = NULL;
    snprintf(args, sizeof args, "apply %s %s %s", swept, in, out);
    int code = tu_run_ttt(args, NULL, &err);
    ck_assert_msg(code == 2 && err && strstr(err, "swept.yaml:2:8: 'sweep' has no meaning"),
                  "exit %d: %s", code, err ? err : "");
    free(err);
    free(before);
    free(after);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* T = 0 with a per-key gate: an empty gate is still a gate (it used to be taken for none, and
 * the runner refused the input; the offsets into its NULL data were undefined behaviour). */
START_TEST(apply_runs_an_empty_sequence_with_a_key_gate) {
    char *dir = tu_mkdtemp();
    char in[512], layer[512], out[512], args[2048];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(layer, sizeof layer, "%s/layer.yaml", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    write_empty_inputs(in, 1);
    ck_assert_int_eq(tu_write_file(layer, "layer: {preset: gla}\n"), 0);
    char *err = NULL;
    snprintf(args, sizeof args, "apply %s %s %s", layer, in, out);
    int code = tu_run_ttt(args, NULL, &err);
    ck_assert_msg(code == 0, "exit %d: %s", code, err ? err : "");
    free(err);
    ttt_st_file *f = NULL;
    ttt_error e = {0};
    ck_assert_int_eq(ttt_st_read(out, &f, &e), TTT_OK);
    const ttt_st_tensor *o = ttt_st_find(f, "o");
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(o->shape[1], 0);
    ck_assert_int_eq(o->shape[3], 3);
    ttt_st_free(f);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* The parameters with their gradients and AdamW's two moments: 24 blocks 4096 wide with an MLP
 * are about 5·10^9 parameters (24 · (4 + 8) · 4096²), 80 GiB at 16 bytes each, while a step's
 * activations at batch 1 and 16 tokens, all the estimate counted before, are under 1 GiB. The
 * regression task's fixed evaluation set (10^5 sequences of 2·10^6 tokens of 4097 floats) was not
 * counted at all. */
START_TEST(estimates_count_parameters_and_evaluation_sets) {
    expect_exit("task: {kind: lm, seq_len: 16}\nmodel: {d_model: 4096, layers: 24, mlp: 4}\n"
                   "train: {batch: 1}\n",
                NULL, 1, "parameters with gradients and AdamW state, estimated) would need");
    expect_exit("task: {kind: regression, dim: 4096, points: 1000000, eval_sequences: 100000}\n",
                NULL, 1, "task: the regression evaluation set would need");
    /* the benchmark's inputs were checked only when the point ran, after the earlier points */
    expect_exit("task: {kind: benchmark, tokens: [1024, 16777216], head_dims: [4096], heads: [64]}"
                "\n",
                NULL, 1, "task: the benchmark at 16777216 tokens, 64 heads of dimension 4096 would "
                         "need");
}
END_TEST

/* The lm corpus is checked when the plan is built: `ttt check` used to say valid for a missing
 * file, and `ttt run` then failed after creating its folder. Check and run now refuse alike
 * (missing, not a regular file, too small for seq_len), at the `path` given, and the run creates
 * nothing. */
START_TEST(lm_corpus_is_refused_by_check_and_run_alike) {
    char *dir = tu_mkdtemp();
    char small[512], yaml[2048], path[600], out[600], args[2048];
    snprintf(small, sizeof small, "%s/small.txt", dir);
    ck_assert_int_eq(tu_write_file(small, "only a few bytes\n"), 0);
    const struct {
        const char *file;
        int code;
        const char *want;
    } cases[] = {
        {"missing.txt", 1, "cannot open text file"},
        {".", 1, "is not a regular file"},
        {"small.txt", 2, "is shorter than seq_len + 1 = 129 bytes"},
    };
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].file);
        snprintf(yaml, sizeof yaml,
                 "task: {kind: lm,\n       path: '%s'}\n"
                 "model: {d_model: 8, layers: 1, heads: 1, mlp: 0}\n"
                 "train: {steps: 2, batch: 2, eval_every: 0, checkpoint_every: 0}\n",
                 path);
        char exp[600];
        snprintf(exp, sizeof exp, "%s/exp.yaml", dir);
        ck_assert_int_eq(tu_write_file(exp, yaml), 0);
        snprintf(out, sizeof out, "%s/run", dir);
        for (int run = 0; run < 2; run++) {
            snprintf(args, sizeof args, run ? "run %s --out %s" : "check %s", exp, out);
            char *msg = NULL;
            int code = tu_run_ttt(args, NULL, &msg);
            ck_assert_msg(code == cases[i].code && msg && strstr(msg, "exp.yaml:2:14: task.path: ") &&
                              strstr(msg, cases[i].want) && strstr(msg, path),
                          "%s %s: exit %d, '%s'", run ? "run" : "check", cases[i].file, code,
                          msg ? msg : "");
            free(msg);
            ck_assert_msg(access(out, F_OK) != 0, "run %s created its folder", cases[i].file);
        }
    }
    tu_rmtree(dir);
    free(dir);
}
END_TEST

#ifndef TU_ASAN
/* A point's pieces were each compared with the machine alone: a training set of about 1 GB and
 * a training step of about 0.85 GB each fit under `ulimit -v` 2 GiB (with the 448 MiB reserve),
 * so `ttt check` said valid although the run holds both at once. The sum is checked too. */
START_TEST(the_pieces_of_a_point_are_checked_together) {
    char *dir = tu_mkdtemp();
    char path[512], cmd[2048], errp[600];
    snprintf(path, sizeof path, "%s/sum.yaml", dir);
    snprintf(errp, sizeof errp, "%s/err", dir);
    ck_assert_int_eq(
        tu_write_file(path, "task: {kind: mqar, vocab: 64, seq_len: 64, pairs: 2,\n"
                            "       train_examples: 2000000, test_examples: 8, eval_batch: 4}\n"
                            "model: {d_model: 64, layers: 1, heads: 1, mlp: 0}\n"
                            "layer: {preset: deltanet}\n"
                            "train: {steps: 2, batch: 128, shards: 1}\n"),
        0);
    const char *bin = getenv("TTT_BIN");
    ck_assert_ptr_nonnull(bin);
    snprintf(cmd, sizeof cmd,
             "ulimit -v 2097152 && OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 %s check %s "
             ">/dev/null 2>%s",
             bin, path, errp);
    const int st = system(cmd);
    char *err = tu_read_file(errp);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1 && err &&
                      strstr(err, "sum.yaml:1:7: task: the point (mqar) in all would need 1.7"),
                  "exit %d: %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, err ? err : "");
    free(err);
    tu_rmtree(dir);
    free(dir);
}
END_TEST
#endif

int main(void) {
    Suite *s = suite_create("refusals");
    TCase *tc = tcase_create("refusals");
    tcase_add_test(tc, an_empty_list_is_refused);
    tcase_add_test(tc, a_null_value_is_refused);
    tcase_add_test(tc, tags_are_refused_like_quoted_numbers);
    tcase_add_test(tc, a_too_small_integer_is_called_too_small);
    tcase_add_test(tc, safetensors_empty_names_and_tab_padding_are_refused);
    tcase_add_test(tc, apply_refuses_its_input_as_output_and_a_sweep);
    tcase_add_test(tc, apply_runs_an_empty_sequence_with_a_key_gate);
    tcase_add_test(tc, estimates_count_parameters_and_evaluation_sets);
    tcase_add_test(tc, lm_corpus_is_refused_by_check_and_run_alike);
#ifndef TU_ASAN /* it runs `ttt check` under `ulimit -v` (testutil.h) */
    tcase_add_test(tc, the_pieces_of_a_point_are_checked_together);
#endif
    suite_add_tcase(s, tc);
    return tu_run(s);
}
