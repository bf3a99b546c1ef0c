/* form: auto's cost model (layers/forms/registry.c ttt_form_plan_with; docs/forms.md "How `auto`
 * chooses"): the decision follows the rate table it is given, not the machine. Every case gives
 * fake tables and checks the choice against estimates worked out here from the FLOP counts of
 * docs/benchmarks.md "What is measured":
 *   linear attention, recurrent: 4·d_k·d_v per token;
 *   linear attention, chunkwise: per chunk of n tokens 2n²(d_k + d_v) + 4n·d_k·d_v;
 *   delta rule, recurrent: 6·d_k·d_v per token;
 *   delta rule, chunkwise: per chunk n²(5d_k + 3d_v) + 6n·d_k·d_v.
 * A form does not compete past its precise_t. And: a layer under form: auto runs the plan's chunk (ttt_layer_forward and the batched runner
 * give the bits of the named form at that chunk). */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "testutil.h"

/* ---- fake tables, chosen per test ---- */

static const ttt_form_rate *g_rec, *g_chunk; /* what the fake table gives each form */

static const ttt_form_rate *fake_rates(const ttt_form_entry *e) {
    if (strcmp(e->form, "recurrent") == 0) return g_rec;
    if (strcmp(e->form, "chunkwise") == 0) return g_chunk;
    return NULL;
}

static void layer_of(ttt_layer *L, const char *preset, const char *form, int d, int chunk) {
    char text[256];
    snprintf(text, sizeof text, "layer: {preset: %s, form: %s, chunk: %d}\n", preset, form,
             chunk);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(text, "<test>", &root, &err) == TTT_OK, "%s", err.msg);
    ttt_status s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d, d, L, &err);
    ttt_cfg_free(root);
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
}

static double la_rec_flops(double d, double T) { return 4.0 * d * d * T; }
static double la_chunk_flops(double d, double T, double C) {
    double f = 0;
    for (double t0 = 0; t0 < T; t0 += C) {
        const double n = t0 + C <= T ? C : T - t0;
        f += 2 * n * n * (2 * d) + 4 * n * d * d;
    }
    return f;
}
static double delta_chunk_flops(double d, double T, double C) {
    double f = 0;
    for (double t0 = 0; t0 < T; t0 += C) {
        const double n = t0 + C <= T ? C : T - t0;
        f += n * n * (8 * d) + 6 * n * d * d;
    }
    return f;
}

static ttt_form_inputs plain(long T) {
    return (ttt_form_inputs){.T = T, .eta = 1, .gate = TTT_FORM_GATE_NONE, .tape = 0};
}

/* Chunkwise C = 32 the fastest by the table: chosen, with its estimate and the recurrent one as
 * the alternative; then the recurrence made faster than every chunk: chosen instead. */
START_TEST(auto_follows_the_table) {
    const ttt_form_rate rec[] = {{TTT_FORM_GATE_NONE, 64, 0, 20.0}, {TTT_FORM_GATE_NONE, 0, 0, 0}};
    const ttt_form_rate chunk[] = {{TTT_FORM_GATE_NONE, 64, 16, 40.0},
                                   {TTT_FORM_GATE_NONE, 64, 32, 60.0},
                                   {TTT_FORM_GATE_NONE, 64, 64, 61.0},
                                   {TTT_FORM_GATE_NONE, 0, 0, 0}};
    g_rec = rec;
    g_chunk = chunk;
    ttt_layer L;
    layer_of(&L, "linear_attention", "auto", 64, 16);
    const ttt_form_inputs in = plain(4096);
    ttt_form_plan plan;
    ttt_error err = {0};
    ck_assert_ptr_nonnull(ttt_form_plan_with(fake_rates, &L, &in, &plan, &err));
    ck_assert_str_eq(plan.entry->form, "chunkwise");
    /* C = 16: 4096·(4·64² + 2·16·128) / 40e9 s; C = 32: … / 60e9; C = 64: … / 61e9 */
    const double t16 = la_chunk_flops(64, 4096, 16) / 40e9, t32 = la_chunk_flops(64, 4096, 32) / 60e9,
                 t64 = la_chunk_flops(64, 4096, 64) / 61e9, tr = la_rec_flops(64, 4096) / 20e9;
    ck_assert(t32 < t16 && t32 < t64 && t32 < tr); /* the table's case: C = 32 wins */
    ck_assert_int_eq(plan.chunk, 32);
    ck_assert(plan.costed);
    ck_assert_double_eq_tol(plan.tok_s, 4096 / t32, 1e-9 * 4096 / t32);
    ck_assert_ptr_nonnull(plan.other);
    ck_assert_str_eq(plan.other->form, "recurrent");
    ck_assert_double_eq_tol(plan.other_tok_s, 4096 / tr, 1e-9 * 4096 / tr);
    char text[256];
    ttt_form_plan_describe(&plan, text, sizeof text);
    ck_assert_msg(strstr(text, "chunkwise C=32") && strstr(text, "vs recurrent"), "%s", text);

    /* the recurrence at 200 GFLOP/s: faster than any chunk */
    const ttt_form_rate fast_rec[] = {{TTT_FORM_GATE_NONE, 64, 0, 200.0},
                                      {TTT_FORM_GATE_NONE, 0, 0, 0}};
    g_rec = fast_rec;
    ck_assert_ptr_nonnull(ttt_form_plan_with(fake_rates, &L, &in, &plan, &err));
    ck_assert_str_eq(plan.entry->form, "recurrent");
    ck_assert_str_eq(plan.other->form, "chunkwise");
    ck_assert_int_eq(plan.other_chunk, 32);
    ttt_form_plan_describe(&plan, text, sizeof text);
    ck_assert_msg(strncmp(text, "recurrent (", 11) == 0, "%s", text); /* no chunk for it */

    /* past its precise_t (8192 tokens for the recurrent linear attention, docs/forms.md
     * "Precision on hard inputs") the recurrence does not compete, however fast */
    const ttt_form_inputs longer = plain(10000);
    ck_assert_ptr_nonnull(ttt_form_plan_with(fake_rates, &L, &longer, &plan, &err));
    ck_assert_str_eq(plan.entry->form, "chunkwise");
    ck_assert_int_eq(plan.chunk, 32);

    /* the delta rule, the same way: chunk 64 the fastest here (rate 300 against 61) */
    const ttt_form_rate dchunk[] = {{TTT_FORM_GATE_NONE, 64, 16, 60.0},
                                    {TTT_FORM_GATE_NONE, 64, 64, 300.0},
                                    {TTT_FORM_GATE_NONE, 0, 0, 0}};
    g_rec = rec;
    g_chunk = dchunk;
    layer_of(&L, "deltanet", "auto", 64, 16);
    ck_assert_ptr_nonnull(ttt_form_plan_with(fake_rates, &L, &in, &plan, &err));
    ck_assert_str_eq(plan.entry->form, "chunkwise");
    ck_assert_int_eq(plan.chunk, 64);
    const double dt64 = delta_chunk_flops(64, 4096, 64) / 300e9;
    ck_assert_double_eq_tol(plan.tok_s, 4096 / dt64, 1e-9 * 4096 / dt64);
}
END_TEST

/* Between measured head sizes the rate is linear in log d; outside it is held; a gate shape
 * without rows uses the ungated rows. */
START_TEST(rates_interpolate_in_log_d) {
    const ttt_form_rate rows[] = {{TTT_FORM_GATE_NONE, 32, 16, 10.0},
                                  {TTT_FORM_GATE_NONE, 128, 16, 50.0},
                                  {TTT_FORM_GATE_TOKEN, 128, 16, 7.0},
                                  {TTT_FORM_GATE_NONE, 0, 0, 0}};
    ttt_layer L;
    layer_of(&L, "linear_attention", "auto", 64, 16);
    /* log 64 is halfway between log 32 and log 128 */
    ck_assert_double_eq_tol(ttt_form_rate_of(rows, &L, TTT_FORM_GATE_NONE, 16), 30.0, 1e-12);
    layer_of(&L, "linear_attention", "auto", 16, 16);
    ck_assert_double_eq_tol(ttt_form_rate_of(rows, &L, TTT_FORM_GATE_NONE, 16), 10.0, 1e-12);
    layer_of(&L, "linear_attention", "auto", 512, 16);
    ck_assert_double_eq_tol(ttt_form_rate_of(rows, &L, TTT_FORM_GATE_NONE, 16), 50.0, 1e-12);
    /* per-token gate: its own row (held below 128); per key dimension: none, the ungated ones */
    layer_of(&L, "linear_attention", "auto", 64, 16);
    ck_assert_double_eq_tol(ttt_form_rate_of(rows, &L, TTT_FORM_GATE_TOKEN, 16), 7.0, 1e-12);
    ck_assert_double_eq_tol(ttt_form_rate_of(rows, &L, TTT_FORM_GATE_KEY, 16), 30.0, 1e-12);
    /* a chunk not measured: no rate */
    ck_assert_double_eq(ttt_form_rate_of(rows, &L, TTT_FORM_GATE_NONE, 32), 0.0);
}
END_TEST

/* Where the rates do not decide: under a tape (the rates are forward's) and for a named form the
 * chunk is layer.chunk and the entry that of auto_rank or the name; without rates for the
 * highest-ranked entry, auto_rank decides. */
START_TEST(rank_or_name_where_rates_do_not_apply) {
    const ttt_form_rate rec[] = {{TTT_FORM_GATE_NONE, 64, 0, 500.0}, {TTT_FORM_GATE_NONE, 0, 0, 0}};
    const ttt_form_rate chunk[] = {{TTT_FORM_GATE_NONE, 64, 64, 1.0},
                                   {TTT_FORM_GATE_NONE, 0, 0, 0}};
    g_rec = rec;
    g_chunk = chunk;
    ttt_layer L;
    layer_of(&L, "linear_attention", "auto", 64, 8);
    ttt_form_inputs in = plain(1024);
    ttt_form_plan plan;
    ttt_error err = {0};
    ck_assert_ptr_nonnull(ttt_form_plan_with(fake_rates, &L, &in, &plan, &err));
    ck_assert_str_eq(plan.entry->form, "recurrent"); /* by the table */
    in.tape = 1;
    ck_assert_ptr_nonnull(ttt_form_plan_with(fake_rates, &L, &in, &plan, &err));
    ck_assert_str_eq(plan.entry->form, "chunkwise"); /* auto_rank 10 over 5 */
    ck_assert_int_eq(plan.chunk, 8);
    ck_assert(!plan.costed);
    in.tape = 0;
    layer_of(&L, "linear_attention", "chunkwise", 64, 8);
    ck_assert_ptr_nonnull(ttt_form_plan_with(fake_rates, &L, &in, &plan, &err));
    ck_assert_str_eq(plan.entry->form, "chunkwise");
    ck_assert_int_eq(plan.chunk, 8);
    ck_assert(!plan.costed);
    /* no rows for the top-ranked entry (chunkwise): rank */
    g_chunk = NULL;
    layer_of(&L, "linear_attention", "auto", 64, 8);
    ck_assert_ptr_nonnull(ttt_form_plan_with(fake_rates, &L, &in, &plan, &err));
    ck_assert_str_eq(plan.entry->form, "chunkwise");
    ck_assert(!plan.costed);
}
END_TEST

/* The layer runs what the plan says: under form: auto, ttt_layer_forward's output has the bits
 * of the named form at the plan's chunk (layer.chunk 7 is in no table, so a layer that ran
 * layer.chunk instead of the plan's would differ whenever the plan picks a chunk). */
START_TEST(auto_runs_the_planned_chunk) {
    const int d = 64, T = 200;
    tu_fixture f;
    tu_fx_init(&f, 5);
    ttt_tensor *q = tu_randn(&f, T, d, 0.1f), *k = tu_randn(&f, T, d, 0.1f),
               *v = tu_randn(&f, T, d, 1.0f);
    ttt_layer La, Ln;
    layer_of(&La, "linear_attention", "auto", d, 7);
    const ttt_form_inputs in = ttt_form_inputs_plain(&La, T, 0);
    ttt_form_plan plan;
    ttt_error err = {0};
    ck_assert_ptr_nonnull(ttt_form_plan_with(NULL, &La, &in, &plan, &err));
    layer_of(&Ln, "linear_attention", plan.entry->form, d, plan.chunk);
    float *out[2];
    for (int r = 0; r < 2; r++) {
        const ttt_layer *L = r ? &Ln : &La;
        ttt_layer_state st;
        ttt_layer_state_init(&f.ctx, L, &st, &f.rng);
        ttt_tensor *o = ttt_tensor_2d(&f.ctx, T, d);
        ck_assert_msg(ttt_layer_forward(&f.ctx, L, o, &st, q, k, v, NULL, NULL, &err) == TTT_OK,
                      "%s", err.msg);
        out[r] = o->data;
    }
    ck_assert_msg(memcmp(out[0], out[1], sizeof(float) * (size_t)T * d) == 0,
                  "auto ran another form or chunk than %s C=%d", plan.entry->form, plan.chunk);
    tu_fx_free(&f);
}
END_TEST

static Suite *plan_suite(void) {
    Suite *s = suite_create("form_plan");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, auto_follows_the_table);
    tcase_add_test(tc, rates_interpolate_in_log_d);
    tcase_add_test(tc, rank_or_name_where_rates_do_not_apply);
    tcase_add_test(tc, auto_runs_the_planned_chunk);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(plan_suite()); }
