/* The `memory` task (docs/math.md §7): write N random key/value pairs into the fast weight, query the
 * stored keys, report recall error and top-1 retrieval accuracy. No training. */
#ifndef TTT_TASK_MEMORY_H
#define TTT_TASK_MEMORY_H

#include "rng.h"
#include "layer.h"

typedef struct ttt_memory_spec {
    int n_pairs;        /* N */
    int d_k, d_v;
    float correlation;  /* pairwise correlation of keys before normalization, in [0, 1) */
    int overwrite;      /* write every key twice, the second time with a new value */
} ttt_memory_spec;

typedef struct ttt_memory_result {
    double recall_error; /* sqrt(mean_i |o_i − v_i|² / |v_i|²), v_i the latest value of key i */
    double accuracy;     /* fraction of queries whose nearest written value is the latest one */
} ttt_memory_result;

/* The task's configuration of one point, as its parse reads it (plan.h). */
typedef struct ttt_memory_cfg {
    ttt_layer L;           /* built for d_k = key_dim, d_v = value_dim */
    ttt_memory_spec spec;  /* everything but n_pairs, which each measurement sets */
    int trials;
    int n_pairs;
    long *pairs;           /* (n_pairs) the values of N, in the order given */
} ttt_memory_cfg;

/* Draw one instance from rng, run the layer over it, and measure. Keys are Gaussian with the
 * requested correlation, then L2-normalized; values are unit-norm Gaussian. With overwrite the
 * candidates for retrieval include the stale values, so a memory that mixes old and new values
 * is caught. */
ttt_status ttt_memory_eval(ttt_ctx *ctx, const ttt_layer *L, const ttt_memory_spec *spec,
                           ttt_rng *rng, ttt_memory_result *out, ttt_error *err);

#endif
