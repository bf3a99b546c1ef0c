/* Token data from files (docs/training.md "Token files"): nanoGPT-style uint16 / uint32
 * little-endian ids with a vocabulary size, a separate validation file, and the errors for files
 * that are not what the options say. The expected tokens are the ids the test itself wrote. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "testutil.h"

/* Write n ids as little-endian integers of `width` bytes (byte by byte: independent of the
 * machine's order). */
static char *write_ids(const char *name, const uint32_t *ids, size_t n, int width) {
    char *path;
    ck_assert(asprintf(&path, "%s/%s", tu_dir, name) > 0);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < width; b++) fputc((int)((ids[i] >> (8 * b)) & 0xFF), f);
    fclose(f);
    return path;
}

/* ids[i] = (i·7919 + 13) mod vocab: every window's tokens and labels are predictable. */
static uint32_t id_at(size_t i, uint32_t vocab) { return (uint32_t)((i * 7919u + 13u) % vocab); }

START_TEST(token_files_give_their_ids) {
    const int widths[2] = {2, 4};
    const uint32_t vocabs[2] = {50257, 100000}; /* GPT-2's; one beyond uint16 */
    for (int w = 0; w < 2; w++) {
        const size_t n_train = 3000, n_val = 500;
        uint32_t *tr = malloc(n_train * sizeof *tr), *va = malloc(n_val * sizeof *va);
        for (size_t i = 0; i < n_train; i++) tr[i] = id_at(i, vocabs[w]);
        for (size_t i = 0; i < n_val; i++) va[i] = id_at(n_train + i, vocabs[w]);
        char *ptr = write_ids(w ? "train32.bin" : "train16.bin", tr, n_train, widths[w]);
        char *pva = write_ids(w ? "val32.bin" : "val16.bin", va, n_val, widths[w]);
        ttt_token_source src = {.path = ptr, .val_path = pva, .width = widths[w],
                                .vocab = (int)vocabs[w], .val_fraction = 0.5, .seq_len = 16};
        ttt_text t;
        ttt_error e = {0};
        ck_assert_msg(ttt_tokens_load(&t, &src, &e) == TTT_OK, "%s", e.msg);
        ck_assert_uint_eq(t.size, n_train + n_val);
        ck_assert_uint_eq(t.n_train, n_train); /* val_path given: val_fraction is not used */
        ttt_batch b;
        ck_assert_int_eq(ttt_batch_init(&b, 8, 16, &e), TTT_OK);
        /* evaluation windows of the validation file: window j starts at its token j·16 */
        int got = ttt_text_windows(&t, TTT_SPLIT_VAL, 0, &b);
        ck_assert_int_eq(got, 8);
        for (int r = 0; r < 8; r++)
            for (int i = 0; i < 16; i++) {
                ck_assert_int_eq(b.tokens[r * 16 + i], (int)va[r * 16 + i]);
                ck_assert_int_eq(b.labels[r * 16 + i], (int)va[r * 16 + i + 1]);
            }
        /* random training windows: tokens are consecutive ids of the training file */
        ttt_rng rng;
        ttt_rng_seed(&rng, 5);
        ttt_text_sample(&t, TTT_SPLIT_TRAIN, &rng, &b);
        for (int r = 0; r < 8; r++) {
            size_t at = 0;
            while (at < n_train && tr[at] != (uint32_t)b.tokens[r * 16]) at++;
            ck_assert(at + 16 < n_train);
            for (int i = 0; i < 16; i++) ck_assert_int_eq(b.labels[r * 16 + i], (int)tr[at + i + 1]);
        }
        ttt_batch_free(&b);
        ttt_text_free(&t);
        free(tr), free(va), free(ptr), free(pva);
    }
}
END_TEST

START_TEST(token_files_that_do_not_fit_are_refused) {
    uint32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (uint32_t)i;
    ids[41] = 300;
    char *p = write_ids("ids.bin", ids, 64, 2);
    ttt_token_source src = {.path = p, .width = 2, .vocab = 256, .val_fraction = 0.25,
                            .seq_len = 8};
    ttt_text t;
    ttt_error e = {0};
    /* an id at or above the vocabulary, named with its position */
    ck_assert_int_eq(ttt_tokens_load(&t, &src, &e), TTT_ERR_RANGE);
    ck_assert_msg(strstr(e.msg, "token 300 at position 41") && strstr(e.msg, p) &&
                      strstr(e.msg, "256"),
                  "%s", e.msg);
    /* one byte more: not a whole number of 2-byte tokens */
    FILE *f = fopen(p, "ab");
    fputc(1, f);
    fclose(f);
    src.vocab = 1 << 30;
    ck_assert_int_eq(ttt_tokens_load(&t, &src, &e), TTT_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, "129 bytes") && strstr(e.msg, "2-byte"), "%s", e.msg);
    /* a validation file too short for one window */
    char *pv = write_ids("val.bin", ids, 5, 2);
    char *pt = write_ids("train.bin", ids, 40, 2);
    src = (ttt_token_source){.path = pt, .val_path = pv, .width = 2, .vocab = 1024,
                             .seq_len = 8};
    ck_assert_int_eq(ttt_tokens_load(&t, &src, &e), TTT_ERR_RANGE);
    ck_assert_msg(strstr(e.msg, "validation split") && strstr(e.msg, pv) &&
                      strstr(e.msg, "5 of its 5 tokens"),
                  "%s", e.msg);
    free(p), free(pv), free(pt);
}
END_TEST

/* End to end: `ttt run` trains on a uint16 file with its own validation file; check refuses a
 * token format without a vocabulary. */
START_TEST(lm_task_trains_on_token_files) {
    uint32_t ids[4096];
    for (int i = 0; i < 4096; i++) ids[i] = (uint32_t)(i % 97); /* a learnable cycle */
    char *pt = write_ids("train.bin", ids, 4000, 2), *pv = write_ids("val.bin", ids + 4000, 96, 2);
    char *cfg, *args, *out, *err;
    ck_assert(asprintf(&cfg, "%s/lm.yaml", tu_dir) > 0);
    char *text;
    ck_assert(asprintf(&text,
                       "task: {kind: lm, path: %s, val_path: %s, format: uint16, vocab: 97, "
                       "seq_len: 16, eval_windows: 4, eval_batch: 4}\n"
                       "model: {d_model: 16, layers: 1, heads: 1, mlp: 0}\n"
                       "layer: {preset: deltanet}\n"
                       "train: {steps: 4, batch: 2, log_every: 1, eval_every: 0, "
                       "checkpoint_every: 0}\n",
                       pt, pv) > 0);
    ck_assert_int_eq(tu_write_file(cfg, text), 0);
    ck_assert(asprintf(&args, "run %s --out %s/run --quiet", cfg, tu_dir) > 0);
    int rc = tu_run_ttt(args, &out, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    char p[600];
    snprintf(p, sizeof p, "%s/run/summary.csv", tu_dir);
    char *sum = tu_read_file(p);
    ck_assert_msg(sum && strstr(sum, "eval_bpt") && !strstr(sum, "eval_bpb"), "%s", sum);
    free(sum), free(out), free(err), free(args), free(text);
    /* no vocabulary for a token file: refused at check, located at `format` */
    ck_assert(asprintf(&text, "task: {kind: lm, path: %s, format: uint32}\n", pt) > 0);
    ck_assert_int_eq(tu_write_file(cfg, text), 0);
    ck_assert(asprintf(&args, "check %s", cfg) > 0);
    rc = tu_run_ttt(args, &out, &err);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "lm.yaml:1:") && strstr(err, "task.vocab"), "%s", err);
    free(out), free(err), free(args), free(text), free(cfg), free(pt), free(pv);
}
END_TEST

/* `ttt sample` on a model trained to count modulo 97 (each id's successor is id + 1): greedy
 * decoding continues the count across the wrap; top-k 1 at any temperature and seed is the
 * same as greedy; the errors name what is missing. */
START_TEST(sample_continues_what_the_model_learned) {
    uint32_t ids[4096];
    for (int i = 0; i < 4096; i++) ids[i] = (uint32_t)(i % 97);
    char *pt = write_ids("train.bin", ids, 4000, 2), *pv = write_ids("val.bin", ids + 4000, 96, 2);
    char *cfg, *text, *args, *out, *err;
    ck_assert(asprintf(&cfg, "%s/count.yaml", tu_dir) > 0);
    ck_assert(asprintf(&text,
                       "task: {kind: lm, path: %s, val_path: %s, format: uint16, vocab: 97, "
                       "seq_len: 16, eval_windows: 4, eval_batch: 4}\n"
                       "model: {d_model: 32, layers: 1, heads: 1, mlp: 0}\n"
                       "layer: {preset: deltanet}\n"
                       "train: {steps: 150, batch: 8, log_every: 50, eval_every: 0, "
                       "checkpoint_every: 0, lr: 1e-2}\n",
                       pt, pv) > 0);
    ck_assert_int_eq(tu_write_file(cfg, text), 0);
    ck_assert(asprintf(&args, "run %s --out %s/run --quiet", cfg, tu_dir) > 0);
    int rc = tu_run_ttt(args, &out, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    free(out), free(err), free(args);
    ck_assert(asprintf(&args, "sample %s/run --prompt '90, 91 92' --tokens 8 --temperature 0",
                       tu_dir) > 0);
    rc = tu_run_ttt(args, &out, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    ck_assert_str_eq(out, "93 94 95 96 0 1 2 3\n");
    char *greedy = out;
    free(err), free(args);
    ck_assert(asprintf(&args, "sample %s/run --prompt '90 91 92' --tokens 8 --top-k 1 "
                              "--temperature 2 --seed 7", tu_dir) > 0);
    rc = tu_run_ttt(args, &out, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    ck_assert_str_eq(out, greedy);
    free(out), free(err), free(args), free(greedy);
    /* ids outside the vocabulary, a point that does not exist, no checkpoint */
    ck_assert(asprintf(&args, "sample %s/run --prompt '5 97'", tu_dir) > 0);
    rc = tu_run_ttt(args, &out, &err);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "below the vocabulary size 97"), "%s", err);
    free(out), free(err), free(args);
    ck_assert(asprintf(&args, "sample %s/run --prompt 5 --point 3", tu_dir) > 0);
    rc = tu_run_ttt(args, &out, &err);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "fewer points"), "%s", err);
    free(out), free(err), free(args);
    char *rm;
    ck_assert(asprintf(&rm, "rm -rf %s/run/checkpoints", tu_dir) > 0);
    ck_assert_int_eq(system(rm), 0);
    ck_assert(asprintf(&args, "sample %s/run --prompt 5", tu_dir) > 0);
    rc = tu_run_ttt(args, &out, &err);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "no checkpoint") && strstr(err, "point0"), "%s", err);
    free(out), free(err), free(args), free(rm), free(text), free(cfg), free(pt), free(pv);
}
END_TEST

static Suite *tokens_suite(void) {
    Suite *s = suite_create("tokens");
    TCase *tc = tcase_create("tokens");
    tcase_add_checked_fixture(tc, tu_dir_setup, tu_dir_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, token_files_give_their_ids);
    tcase_add_test(tc, token_files_that_do_not_fit_are_refused);
    tcase_add_test(tc, lm_task_trains_on_token_files);
    tcase_add_test(tc, sample_continues_what_the_model_learned);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(tokens_suite()); }
