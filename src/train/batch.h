/* Token batches, fixed example sets and the epoch sampler of outer-loop training: what a trained
 * task hands the training loop (src/train/train.h). The generators that fill them live with
 * their tasks (src/tasks/data.h). */
#ifndef TTT_BATCH_H
#define TTT_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h"
#include "status.h"

/* ============================================================================================
 * Token batches (mqar, lm)
 * ========================================================================================= */

#define TTT_LABEL_IGNORE (-1)

typedef struct ttt_batch {
    int B, L;
    int *tokens; /* (B, L) input token ids */
    int *labels; /* (B, L) the token to predict at each position, TTT_LABEL_IGNORE = no loss */
} ttt_batch;

ttt_status ttt_batch_init(ttt_batch *b, int B, int L, ttt_error *err);
void ttt_batch_free(ttt_batch *b);
/* Number of positions with a label. */
long ttt_batch_count_labels(const ttt_batch *b);
/* Packed documents (the lm task's doc_separator): every label equal to `id` becomes
 * TTT_LABEL_IGNORE. Such a label is the first token of the next document, which the model is not
 * asked to predict from the document before it. */
void ttt_batch_ignore_label(ttt_batch *b, int id);
/* Score logits against the labels: over labelled positions only, *sum_nats += −log softmax(z)[y]
 * (computed in double, max-shifted), *n_correct += [argmax z == y] (ties go to the lowest index),
 * *n_labelled += 1. Any output pointer may be NULL. Labels must be in [0, V) or ignored. */
void ttt_batch_score(const ttt_batch *b, const float *logits /* (B, L, V) */, int V,
                     double *sum_nats, long *n_correct, long *n_labelled);
/* Mean cross-entropy in nats per byte → bits per byte (÷ ln 2). */
double ttt_bits_per_byte(double mean_nats);

/* A fixed set of equal-length examples (a train or test set). */
typedef struct ttt_token_set {
    int n, L;
    int *tokens; /* (n, L) */
    int *labels; /* (n, L) */
} ttt_token_set;

void ttt_token_set_free(ttt_token_set *s);
/* b row r ← example idx[r] of s, for r < b->B (b->L must equal s->L). */
void ttt_token_set_gather(ttt_batch *b, const ttt_token_set *s, const int *idx /* (b->B) */);

/* Epochs over a set of n examples: each epoch visits every index once in the order of a
 * permutation drawn from ttt_rng_fork(base, epoch); batches run on across epoch boundaries.
 * The whole state is TTT_SAMPLER_WORDS words (base rng, epoch, position) for checkpoints. */
#define TTT_SAMPLER_WORDS 6
typedef struct ttt_sampler {
    int n;
    ttt_rng base;
    int64_t epoch; /* current epoch, from 0 */
    int pos;       /* next index into perm */
    int *perm;     /* (n) permutation of the current epoch */
} ttt_sampler;

ttt_status ttt_sampler_init(ttt_sampler *s, int n, const ttt_rng *base, ttt_error *err);
void ttt_sampler_free(ttt_sampler *s);
void ttt_sampler_next(ttt_sampler *s, int *idx /* (count) */, int count);
void ttt_sampler_get_state(const ttt_sampler *s, uint64_t words[TTT_SAMPLER_WORDS]);
/* Restore a state saved from a sampler over the same n (TTT_ERR_RANGE when the position does
 * not fit this n; the sampler is then unchanged). */
ttt_status ttt_sampler_set_state(ttt_sampler *s, const uint64_t words[TTT_SAMPLER_WORDS],
                                 ttt_error *err);

#endif
