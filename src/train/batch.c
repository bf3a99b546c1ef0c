/* Token batches, fixed sets and the epoch sampler (see batch.h). */
#include "batch.h"
#include "fault.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Batches */

ttt_status ttt_batch_init(ttt_batch *b, int B, int L, ttt_error *err) {
    memset(b, 0, sizeof *b);
    if (B <= 0 || L <= 0)
        return ttt_error_set(err, TTT_ERR_RANGE, "batch of %d sequences of length %d", B, L);
    size_t n = (size_t)B * (size_t)L;
    b->tokens = ttt_fault_malloc(n * sizeof *b->tokens);
    b->labels = ttt_fault_malloc(n * sizeof *b->labels);
    if (!b->tokens || !b->labels) {
        ttt_batch_free(b);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for a batch of %d x %d", B, L);
    }
    b->B = B;
    b->L = L;
    for (size_t i = 0; i < n; i++) {
        b->tokens[i] = 0;
        b->labels[i] = TTT_LABEL_IGNORE;
    }
    return TTT_OK;
}

void ttt_batch_free(ttt_batch *b) {
    if (!b) return;
    free(b->labels);
    free(b->tokens);
    memset(b, 0, sizeof *b);
}

long ttt_batch_count_labels(const ttt_batch *b) {
    long c = 0;
    for (size_t i = 0; i < (size_t)b->B * (size_t)b->L; i++) c += b->labels[i] != TTT_LABEL_IGNORE;
    return c;
}

void ttt_batch_ignore_label(ttt_batch *b, int id) {
    for (size_t i = 0; i < (size_t)b->B * (size_t)b->L; i++)
        if (b->labels[i] == id) b->labels[i] = TTT_LABEL_IGNORE;
}

void ttt_batch_score(const ttt_batch *b, const float *logits, int V, double *sum_nats,
                     long *n_correct, long *n_labelled) {
    double nats = 0.0;
    long correct = 0, labelled = 0;
    for (size_t i = 0; i < (size_t)b->B * (size_t)b->L; i++) {
        int y = b->labels[i];
        if (y == TTT_LABEL_IGNORE) continue;
        TTT_ASSERT(y >= 0 && y < V);
        const float *z = logits + i * (size_t)V; /* (V) */
        int arg = 0;
        for (int v = 1; v < V; v++)
            if (z[v] > z[arg]) arg = v;
        double mx = z[arg], s = 0.0;
        for (int v = 0; v < V; v++) s += exp((double)z[v] - mx);
        nats += log(s) + mx - (double)z[y];
        correct += arg == y;
        labelled++;
    }
    if (sum_nats) *sum_nats += nats;
    if (n_correct) *n_correct += correct;
    if (n_labelled) *n_labelled += labelled;
}

double ttt_bits_per_byte(double mean_nats) { return mean_nats / 0.69314718055994530942; }

/* ------------------------------------------------------------------------------------------ */
/* Fixed sets and the epoch sampler */

void ttt_token_set_free(ttt_token_set *s) {
    if (!s) return;
    free(s->labels);
    free(s->tokens);
    memset(s, 0, sizeof *s);
}

void ttt_token_set_gather(ttt_batch *b, const ttt_token_set *s, const int *idx) {
    TTT_ASSERT(b->L == s->L);
    size_t L = (size_t)s->L;
    for (int r = 0; r < b->B; r++) {
        TTT_ASSERT(idx[r] >= 0 && idx[r] < s->n);
        memcpy(b->tokens + (size_t)r * L, s->tokens + (size_t)idx[r] * L, L * sizeof(int));
        memcpy(b->labels + (size_t)r * L, s->labels + (size_t)idx[r] * L, L * sizeof(int));
    }
}

static void sampler_shuffle(ttt_sampler *s) {
    ttt_rng r = ttt_rng_fork(&s->base, (uint64_t)s->epoch);
    ttt_rng_permutation(&r, s->perm, s->n);
}

ttt_status ttt_sampler_init(ttt_sampler *s, int n, const ttt_rng *base, ttt_error *err) {
    memset(s, 0, sizeof *s);
    if (n <= 0) return ttt_error_set(err, TTT_ERR_RANGE, "cannot sample from an empty set");
    s->perm = ttt_fault_malloc((size_t)n * sizeof *s->perm);
    if (!s->perm) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for a sampler of %d", n);
    s->n = n;
    s->base = *base;
    sampler_shuffle(s);
    return TTT_OK;
}

void ttt_sampler_free(ttt_sampler *s) {
    if (!s) return;
    free(s->perm);
    memset(s, 0, sizeof *s);
}

void ttt_sampler_next(ttt_sampler *s, int *idx, int count) {
    for (int i = 0; i < count; i++) {
        if (s->pos == s->n) {
            s->epoch++;
            s->pos = 0;
            sampler_shuffle(s);
        }
        idx[i] = s->perm[s->pos++];
    }
}

void ttt_sampler_get_state(const ttt_sampler *s, uint64_t words[TTT_SAMPLER_WORDS]) {
    for (int i = 0; i < 4; i++) words[i] = s->base.s[i];
    words[4] = (uint64_t)s->epoch;
    words[5] = (uint64_t)s->pos;
}

ttt_status ttt_sampler_set_state(ttt_sampler *s, const uint64_t words[TTT_SAMPLER_WORDS],
                                 ttt_error *err) {
    if (words[5] > (uint64_t)s->n)
        return ttt_error_set(err, TTT_ERR_RANGE,
                             "sampler state: position %llu in an epoch of %d examples (saved "
                             "from another data set?)",
                             (unsigned long long)words[5], s->n);
    for (int i = 0; i < 4; i++) s->base.s[i] = words[i];
    s->epoch = (int64_t)words[4];
    s->pos = (int)words[5];
    sampler_shuffle(s);
    return TTT_OK;
}

