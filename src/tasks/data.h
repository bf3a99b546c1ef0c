/* Data for the trained tasks of docs/math.md §7: multi-query associative recall (mqar), in-context
 * linear regression (regression) and byte-level language modelling (lm).
 *
 * Every generator is deterministic given its ttt_rng (same state, same bits) and draws in a
 * documented order, so a run resumed from a checkpoint that saved the rng state sees the same
 * data as an uninterrupted one. */
#ifndef TTT_DATA_H
#define TTT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h"
#include "status.h"

#include "batch.h"

/* ============================================================================================
 * mqar — multi-query associative recall (docs/math.md §7; Arora, Eyuboglu et al., "Zoology", the
 * multiquery_ar generator of HazyResearch/zoology)
 *
 * With V = vocab, L = seq_len, N = n_pairs, C = 2N, S = ⌊(L − C)/2⌋ gap slots:
 *   keys  k_1 … k_N  drawn uniformly without replacement from [1, V/2)   (V/2 = ⌊V/2⌋)
 *   values v_1 … v_N drawn uniformly without replacement from [V/2, V)
 *   positions 0 … C−1 hold the context k_1 v_1 k_2 v_2 … k_N v_N;
 *   key k_j is queried at gap slot g_j ∈ {1 … S}: the g_j are drawn without replacement
 *   (successively: draw with probability ∝ weight, remove, renormalize) with weight
 *   g^(power_a − 1) = g^−0.99 for the Zoology default power_a = 0.01; g_1 is drawn first;
 *   the query token k_j is at position C + 2(g_j − 1), and the LABEL AT THAT SAME POSITION is v_j;
 *   every other label is TTT_LABEL_IGNORE; every other position holds the filler token 0, or with
 *   random_filler a token uniform in [0, V) (as in Zoology: it may equal a key; such a token is
 *   not a query and has no label).
 * Alignment: Zoology builds an (L+1)-long sequence with the value's label one position after the
 * key and then shifts labels left by one (next-token prediction), so the model must emit v_j at
 * the position where it reads the query key k_j; the value itself never appears after the
 * context. The position after each query (C + 2g_j − 1) is filler. Queries therefore come in the
 * random order of their slots; since the keys are a uniformly random draw, the context order
 * k_1 … k_N is itself random.
 * Draw order per example (for determinism): N keys, N values, N gap slots, then with
 * random_filler one draw per filler position from left to right.
 * ========================================================================================= */

typedef struct ttt_mqar_config {
    int vocab;         /* V (default 256) */
    int seq_len;       /* L (default 128) */
    int n_pairs;       /* N (default 8) */
    int random_filler; /* 0: filler token 0 (default); 1: uniform in [0, V) */
    double power_a;    /* gap weights g^(power_a − 1) (default 0.01, i.e. g^−0.99) */
} ttt_mqar_config;

void ttt_mqar_config_default(ttt_mqar_config *c);
/* TTT_ERR_RANGE with the violated condition: V ≥ 4, N ≥ 1, N ≤ V/2 − 1 (distinct keys),
 * N ≤ V − V/2 (distinct values), N ≤ S (distinct slots, i.e. L ≥ 4N), 0 < power_a ≤ 1. */
ttt_status ttt_mqar_config_check(const ttt_mqar_config *c, ttt_error *err);

/* A generator: the configuration plus scratch space (no allocation per example). */
typedef struct ttt_mqar {
    ttt_mqar_config cfg;
    int n_slots;    /* S */
    int *key_pool;  /* (V/2 − 1) scratch for drawing keys */
    int *val_pool;  /* (V − V/2) scratch for drawing values */
    double *weight; /* (S) gap weights g^(power_a − 1), g = 1 … S */
    double *w_left; /* (S) weights of the slots not drawn yet */
    int *slot;      /* (N) g_j − 1 of the last example */
} ttt_mqar;

ttt_status ttt_mqar_init(ttt_mqar *g, const ttt_mqar_config *c, ttt_error *err);
void ttt_mqar_free(ttt_mqar *g);
/* One example. */
void ttt_mqar_example(ttt_mqar *g, ttt_rng *rng, int *tokens /* (L) */, int *labels /* (L) */);
/* b->B examples (b->L must equal L). */
void ttt_mqar_fill(ttt_mqar *g, ttt_rng *rng, ttt_batch *b);
/* A fixed set of n examples. */
ttt_status ttt_mqar_make_set(ttt_token_set *out, const ttt_mqar_config *c, int n, ttt_rng *rng,
                             ttt_error *err);
/* The train and test sets of a run, from distinct streams of `root` (not advanced):
 * ttt_rng_fork(root, ttt_hash_str("mqar/train")) and ttt_rng_fork(root, ttt_hash_str("mqar/test")). */
ttt_status ttt_mqar_make_split(ttt_token_set *train, ttt_token_set *test, const ttt_mqar_config *c,
                               int n_train, int n_test, const ttt_rng *root, ttt_error *err);

/* ============================================================================================
 * regression — in-context linear regression (docs/math.md §7; the setting of Garg et al., "What can
 * transformers learn in-context?")
 *
 * Per sequence: w ~ N(0, I_d); for points i = 0 … n−1: x_i ~ N(0, I_d), y_i = w·x_i + σ·ε_i,
 * ε_i ~ N(0, 1) (σ = noise_std, default 0). Draw order per sequence: w (d), then per point x_i (d)
 * and, only when σ > 0, ε_i. y is computed in double and rounded to float.
 *
 * Tokens have d + 1 features: d for x and the last for y. Two layouts:
 *   TTT_REG_INTERLEAVED (default; Garg et al.): T = 2n tokens, token 2i = [x_i, 0] (y masked) is
 *     where y_i is predicted, token 2i+1 = [0…0, y_i] reveals it. The prediction of y_i sees the
 *     i earlier pairs: one sequence gives the error for every context size k = 0 … n−1.
 *   TTT_REG_PAIRED: T = n tokens, token i = [x_i, y_i] for the first n − n_query points (the
 *     context) and [x_i, 0] for the last n_query points (the queries), each predicted with the
 *     n − n_query context pairs visible (and the earlier queries' x).
 * ========================================================================================= */

typedef enum ttt_regression_layout {
    TTT_REG_INTERLEAVED = 0,
    TTT_REG_PAIRED = 1
} ttt_regression_layout;

typedef struct ttt_regression_config {
    int dim;                      /* d (default 8) */
    int n_points;                 /* n (default 32) */
    double noise_std;             /* σ (default 0) */
    ttt_regression_layout layout; /* default TTT_REG_INTERLEAVED */
    int n_query;                  /* paired layout: number of query points (default 1) */
} ttt_regression_config;

void ttt_regression_config_default(ttt_regression_config *c);
ttt_status ttt_regression_config_check(const ttt_regression_config *c, ttt_error *err);
/* Tokens per sequence of the layout (2n or n). */
int ttt_regression_seq_len(const ttt_regression_config *c);

typedef struct ttt_regression_batch {
    int B, T, d, n;
    float *inputs;  /* (B, T, d+1) */
    float *targets; /* (B, T) y to predict where mask = 1, else 0 */
    float *mask;    /* (B, T) 1 where a prediction is scored */
    int *n_context; /* (T) (x, y) pairs visible to the prediction at t; -1 where mask = 0 */
    int *point;     /* (T) the point index i predicted at t; -1 where mask = 0 */
    float *x;       /* (B, n, d) the raw points */
    float *y;       /* (B, n) */
    float *w;       /* (B, d) the true weights */
} ttt_regression_batch;

ttt_status ttt_regression_batch_init(ttt_regression_batch *b, const ttt_regression_config *c, int B,
                                     ttt_error *err);
void ttt_regression_batch_free(ttt_regression_batch *b);
void ttt_regression_fill(ttt_regression_batch *b, const ttt_regression_config *c, ttt_rng *rng);

/* The least-squares baseline on the batch's own sequences: for every scored position t,
 * sq_err[b·T + t] = (x_i·ŵ − y_i)² where i = point[t] and ŵ is the minimum-norm least-squares
 * fit (LAPACK dgelsd, in double) to the n_context[t] visible pairs (ŵ = 0 with none); 0 where
 * mask = 0. For k < d pairs this is the minimum-norm interpolant. */
ttt_status ttt_regression_ls_errors(double *sq_err /* (B, T) */, const ttt_regression_batch *b,
                                    ttt_error *err);
/* The least-squares error-vs-context-size curve: curve[k] = mean over n_seq fresh sequences (in
 * batches drawn with ttt_regression_fill from rng, interleaved layout) of the squared error of
 * predicting point k from points 0 … k−1, k = 0 … n−1. */
ttt_status ttt_regression_ls_curve(double *curve /* (n) */, const ttt_regression_config *c,
                                   int n_seq, ttt_rng *rng, ttt_error *err);

/* ============================================================================================
 * lm — byte-level language modelling on a text file (docs/math.md §7)
 *
 * The file's bytes are the tokens (vocabulary 256). The last ⌊size · val_fraction⌋ bytes are the
 * validation split, the rest the training split; a window never crosses the boundary. A window
 * of L + 1 bytes starting at s gives tokens = bytes[s … s+L−1] and labels = bytes[s+1 … s+L].
 * Metric: bits per byte = mean cross-entropy in nats / ln 2.
 * ========================================================================================= */

#define TTT_LM_VOCAB 256

typedef enum ttt_split { TTT_SPLIT_TRAIN = 0, TTT_SPLIT_VAL = 1 } ttt_split;

typedef struct ttt_text {
    char *path;
    unsigned char *bytes; /* (size · width) the token file(s): training tokens, then validation */
    int width;            /* bytes per token: 1 (bytes of text), 2 or 4 (little-endian) */
    size_t size;          /* tokens */
    size_t n_train; /* train = [0, n_train), validation = [n_train, size) (tokens) */
} ttt_text;

/* Where the tokens come from: a text file (every byte a token, vocabulary 256) or a file of
 * token ids, uint16 or uint32 little-endian as nanoGPT's prepare scripts write them
 * (train.bin / val.bin). */
typedef struct ttt_token_source {
    const char *path;     /* the training tokens; also the validation ones without val_path */
    const char *val_path; /* NULL: the validation split is the last val_fraction of path */
    int width;            /* 1 = text bytes, 2 = uint16, 4 = uint32 */
    int vocab;            /* every token id must be below it (256 for text) */
    double val_fraction;  /* used without val_path */
    int seq_len;
} ttt_token_source;

/* Errors naming the file: missing or unreadable (TTT_ERR_IO), empty or not a whole number of
 * tokens (TTT_ERR_FORMAT), a token id ≥ vocab (TTT_ERR_RANGE, with its position), a split
 * shorter than seq_len + 1 tokens (TTT_ERR_RANGE, with the sizes). */
ttt_status ttt_tokens_load(ttt_text *t, const ttt_token_source *src, ttt_error *err);
/* The same errors as ttt_tokens_load that the files' sizes decide (missing, not a regular file,
 * empty, not whole tokens, a split too short), without reading them: what `ttt check` refuses
 * is what a run would (the ids are checked when the run loads them). */
ttt_status ttt_tokens_check(const ttt_token_source *src, ttt_error *err);

/* A text file as tokens (ttt_tokens_load with width 1, vocabulary 256, no val_path);
 * val_fraction in [0, 1) (0 = no validation split). */
ttt_status ttt_text_load(ttt_text *t, const char *path, double val_fraction, int seq_len,
                         ttt_error *err);
/* The same errors as ttt_text_load, from the file's size alone (nothing is read): what
 * `ttt check` refuses is exactly what a run would (docs/hardening.md "Out of memory"). */
ttt_status ttt_text_check(const char *path, double val_fraction, int seq_len, ttt_error *err);
void ttt_text_free(ttt_text *t);
/* Start offset and length of a split. */
size_t ttt_text_split_start(const ttt_text *t, ttt_split s);
size_t ttt_text_split_size(const ttt_text *t, ttt_split s);
/* b->B random windows of the split: each start is uniform over the split's size − L positions
 * (one ttt_rng_below draw per row, in row order). */
void ttt_text_sample(const ttt_text *t, ttt_split s, ttt_rng *rng, ttt_batch *b);
/* For evaluation over a whole split: the number of non-overlapping windows, ⌊(size − 1) / L⌋
 * (window j starts at j·L, so the windows' labels cover the split's bytes 1 … once each). */
size_t ttt_text_n_windows(const ttt_text *t, ttt_split s, int L);
/* Rows r = 0 … b->B−1 ← windows first + r; rows past the last window get every label ignored.
 * Returns the number of real windows filled. */
int ttt_text_windows(const ttt_text *t, ttt_split s, size_t first, ttt_batch *b);

#endif
