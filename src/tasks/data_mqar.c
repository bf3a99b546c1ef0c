/* The mqar generator (see data.h). */
#include "data.h"
#include "fault.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* mqar */

void ttt_mqar_config_default(ttt_mqar_config *c) {
    c->vocab = 256;
    c->seq_len = 128;
    c->n_pairs = 8;
    c->random_filler = 0;
    c->power_a = 0.01;
}

ttt_status ttt_mqar_config_check(const ttt_mqar_config *c, ttt_error *err) {
    int V = c->vocab, L = c->seq_len, N = c->n_pairs;
    if (V < 4) return ttt_error_set(err, TTT_ERR_RANGE, "mqar: vocab = %d must be at least 4", V);
    if (N < 1) return ttt_error_set(err, TTT_ERR_RANGE, "mqar: n_pairs = %d must be at least 1", N);
    if (N > V / 2 - 1)
        return ttt_error_set(
            err, TTT_ERR_RANGE,
            "mqar: n_pairs = %d distinct keys do not fit in [1, vocab/2) = [1, %d)", N, V / 2);
    if (N > V - V / 2)
        return ttt_error_set(err, TTT_ERR_RANGE,
                             "mqar: n_pairs = %d distinct values do not fit in [%d, %d)", N, V / 2,
                             V);
    if (L < 4 * N)
        return ttt_error_set(err, TTT_ERR_RANGE,
                             "mqar: seq_len = %d is too short for n_pairs = %d (needs at least 4 x "
                             "n_pairs = %d: the context and a query slot of two tokens per pair)",
                             L, N, 4 * N);
    if (!(c->power_a > 0 && c->power_a <= 1))
        return ttt_error_set(err, TTT_ERR_RANGE, "mqar: power_a = %g must be in (0, 1]",
                             c->power_a);
    return TTT_OK;
}

void ttt_mqar_free(ttt_mqar *g) {
    if (!g) return;
    free(g->slot);
    free(g->w_left);
    free(g->weight);
    free(g->val_pool);
    free(g->key_pool);
    memset(g, 0, sizeof *g);
}

ttt_status ttt_mqar_init(ttt_mqar *g, const ttt_mqar_config *c, ttt_error *err) {
    memset(g, 0, sizeof *g);
    TTT_TRY(ttt_mqar_config_check(c, err));
    g->cfg = *c;
    int V = c->vocab, N = c->n_pairs;
    int S = (c->seq_len - 2 * N) / 2;
    g->n_slots = S;
    g->key_pool = ttt_fault_malloc((size_t)(V / 2 - 1) * sizeof *g->key_pool);
    g->val_pool = ttt_fault_malloc((size_t)(V - V / 2) * sizeof *g->val_pool);
    g->weight = ttt_fault_malloc((size_t)S * sizeof *g->weight);
    g->w_left = ttt_fault_malloc((size_t)S * sizeof *g->w_left);
    g->slot = ttt_fault_malloc((size_t)N * sizeof *g->slot);
    if (!g->key_pool || !g->val_pool || !g->weight || !g->w_left || !g->slot) {
        ttt_mqar_free(g);
        return ttt_error_set(err, TTT_ERR_NOMEM, "mqar: out of memory");
    }
    for (int i = 0; i < S; i++) g->weight[i] = pow((double)(i + 1), c->power_a - 1.0);
    return TTT_OK;
}

/* The first `k` entries of pool[0..n) become a uniform draw without replacement from the values
 * lo … lo+n−1 (partial Fisher–Yates: k draws). */
static void draw_distinct(int *pool, int n, int lo, int k, ttt_rng *rng) {
    for (int i = 0; i < n; i++) pool[i] = lo + i;
    for (int i = 0; i < k; i++) {
        int j = i + (int)ttt_rng_below(rng, (uint64_t)(n - i));
        int t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
    }
}

void ttt_mqar_example(ttt_mqar *g, ttt_rng *rng, int *tokens, int *labels) {
    const ttt_mqar_config *c = &g->cfg;
    int V = c->vocab, L = c->seq_len, N = c->n_pairs, S = g->n_slots, C = 2 * N;
    draw_distinct(g->key_pool, V / 2 - 1, 1, N, rng);
    draw_distinct(g->val_pool, V - V / 2, V / 2, N, rng);

    /* Successive weighted draws without replacement. The remaining total is re-summed for each
     * draw (O(S·N), small) rather than updated by subtraction, so rounding cannot accumulate;
     * a target that lands past the last remaining slot by rounding takes that slot. */
    memcpy(g->w_left, g->weight, (size_t)S * sizeof *g->w_left);
    for (int j = 0; j < N; j++) {
        double total = 0.0;
        for (int i = 0; i < S; i++) total += g->w_left[i];
        double target = ttt_rng_uniform(rng) * total, acc = 0.0;
        int pick = -1;
        for (int i = 0; i < S; i++) {
            if (g->w_left[i] <= 0.0) continue;
            pick = i;
            acc += g->w_left[i];
            if (target < acc) break;
        }
        TTT_ASSERT(pick >= 0);
        g->slot[j] = pick;
        g->w_left[pick] = 0.0;
    }

    for (int t = 0; t < L; t++) {
        tokens[t] = 0;
        labels[t] = TTT_LABEL_IGNORE;
    }
    for (int j = 0; j < N; j++) {
        tokens[2 * j] = g->key_pool[j];
        tokens[2 * j + 1] = g->val_pool[j];
        int pos = C + 2 * g->slot[j];
        tokens[pos] = g->key_pool[j];
        labels[pos] = g->val_pool[j];
    }
    if (c->random_filler)
        for (int t = C; t < L; t++)
            if (labels[t] == TTT_LABEL_IGNORE) tokens[t] = (int)ttt_rng_below(rng, (uint64_t)V);
}

void ttt_mqar_fill(ttt_mqar *g, ttt_rng *rng, ttt_batch *b) {
    TTT_ASSERT(b->L == g->cfg.seq_len);
    for (int r = 0; r < b->B; r++)
        ttt_mqar_example(g, rng, b->tokens + (size_t)r * b->L, b->labels + (size_t)r * b->L);
}

ttt_status ttt_mqar_make_set(ttt_token_set *out, const ttt_mqar_config *c, int n, ttt_rng *rng,
                             ttt_error *err) {
    memset(out, 0, sizeof *out);
    if (n < 0) return ttt_error_set(err, TTT_ERR_RANGE, "mqar: %d examples", n);
    ttt_mqar g;
    TTT_TRY(ttt_mqar_init(&g, c, err));
    size_t cells = (size_t)n * (size_t)c->seq_len;
    out->tokens = ttt_fault_malloc((cells ? cells : 1) * sizeof(int));
    out->labels = ttt_fault_malloc((cells ? cells : 1) * sizeof(int));
    if (!out->tokens || !out->labels) {
        ttt_token_set_free(out);
        ttt_mqar_free(&g);
        return ttt_error_set(err, TTT_ERR_NOMEM, "mqar: out of memory for %d examples", n);
    }
    out->n = n;
    out->L = c->seq_len;
    for (int i = 0; i < n; i++)
        ttt_mqar_example(&g, rng, out->tokens + (size_t)i * out->L,
                         out->labels + (size_t)i * out->L);
    ttt_mqar_free(&g);
    return TTT_OK;
}

ttt_status ttt_mqar_make_split(ttt_token_set *train, ttt_token_set *test, const ttt_mqar_config *c,
                               int n_train, int n_test, const ttt_rng *root, ttt_error *err) {
    memset(test, 0, sizeof *test);
    ttt_rng r_train = ttt_rng_fork(root, ttt_hash_str("mqar/train"));
    ttt_rng r_test = ttt_rng_fork(root, ttt_hash_str("mqar/test"));
    TTT_TRY(ttt_mqar_make_set(train, c, n_train, &r_train, err));
    ttt_status st = ttt_mqar_make_set(test, c, n_test, &r_test, err);
    if (st != TTT_OK) ttt_token_set_free(train);
    return st;
}
