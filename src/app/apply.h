/* Tensors in, tensors out: run any layer (preset, tuple, form) on tensors supplied from outside,
 * e.g. by PyTorch, and hand the outputs back. Behind `ttt apply LAYER.yaml IN OUT`.
 *
 * Files use the public layout of PyTorch linear-attention libraries, (B, T, H, D): batch, time,
 * head, feature. Internally every (batch, head) pair is one independent sequence (docs/math.md §0:
 * "batch and heads are independent copies") converted to the (T, D) layout the layer works on;
 * forms with a strided kernel (layers/forms/form.h, forward_strided) read and write it in place
 * with row strides instead (same output bits; TTT_APPLY_GATHER=1 in the environment forces the
 * copies, layers/batch.c).
 *
 * Input tensors (any dtype the safetensors reader accepts; read as float32):
 *   q              (B, T, H, d_k)   queries (multiplied by layer.scale, default 1.0 — PyTorch
 *                                   libraries usually default to d_k^-1/2: set it explicitly)
 *   k              (B, T, H, d_k)   keys
 *   v              (B, T, H, d_v)   values
 *   beta           (B, T, H)        optional per-token learning rate η_t; the layer writes with
 *                                   β_t = θ·η_t, θ = layer.optimizer.lr (default 1, so β_t = η_t
 *                                   as in DeltaNet). Absent: η_t = 1.
 *   log_alpha      (B, T, H)        optional per-token log retention log α_t (scalar gate), or
 *                  (B, T, H, d_k)   per key dimension (vector gate, GLA). Replaces the constant
 *                                   layer.optimizer.decay. Absent: that constant applies.
 *   initial_state  (B, H, *W)       optional initial fast weights; for the linear model
 *                                   (B, H, d_k, d_v). Models with several weight tensors take
 *                                   initial_state.0, initial_state.1, … each (B, H, *W_i) and each
 *                                   optional. Absent: the model's own initialization.
 *   initial_state.opt0, …           optional optimizer state of each weight (initial_state.0.opt0,
 *                  (B, H, *W)       … with several weights), e.g. Titans' momentum; absent: the
 *                                   optimizer's initial state for the weights above.
 *   initial_state.z (B, H, d_k, 1)  the normalizer of normalize: ratio.
 *                                   The names follow ttt_layer_state_info (layers/layer.h).
 * Any other name is an error (a misspelt optional tensor must not be silently ignored).
 *
 * Output tensors (F32):
 *   o              (B, T, H, d_v)   the layer output o_t = f(W_t; q_t)
 *   final_state    (B, H, *W)       the fast weights after the last token (final_state.0, … for
 *                                   models with several weights), in the layout initial_state
 *                                   takes, and final_state.opt0, … / final_state.z for the rest of
 *                                   the carried state: a sequence continued in a second call with
 *                                   every final_state* as initial_state* equals one call.
 * Metadata: ttt_version, preset, form (the form that ran: auto is resolved for the inputs),
 * layer (the resolved `layer:` mapping), layout ("BTHD"), threads (how many ran the sequences)
 * and seconds (wall time of the layer over all sequences, without reading or writing files:
 * what a benchmark against another tool compares).
 *
 * Threads: the (batch, head) sequences are split over OpenMP threads in contiguous ranges (a
 * static schedule), single-threaded BLAS inside each (ttt_apply* call ttt_blas_set_threads(1)). Every sequence is computed by one thread with the same code, so the
 * outputs are bit-identical for every thread count and every run. */
#ifndef TTT_APPLY_H
#define TTT_APPLY_H

#include "config.h"
#include "safetensors.h"
#include "status.h"

#define TTT_APPLY_MAX_OUT 42 /* o + up to TTT_BATCH_MAX_STATE (layers/layer.h) state tensors */
#define TTT_APPLY_MAX_META 8 /* metadata pairs of the output file */
#define TTT_APPLY_MAX_THREADS 256

/* The outputs of one call; names, data and metadata strings are owned by it. */
typedef struct ttt_apply_out {
    int n;
    ttt_st_tensor t[TTT_APPLY_MAX_OUT];
    int n_meta;
    char *meta[2 * TTT_APPLY_MAX_META]; /* key, value, … */
} ttt_apply_out;

/* Validate the `layer:` mapping for the key/value dims of the inputs (the mapping is only read;
 * its rendering, as ttt_layer_parse_section gives it, is recorded in the output's metadata),
 * check every input's shape, and run the layer over every (batch, head) sequence. Shape errors
 * name the tensors and their shapes. */
ttt_status ttt_apply(const ttt_cfg_node *layer_map, const ttt_st_file *in, ttt_apply_out *out,
                     ttt_error *err);
/* The same with a thread count: threads ≥ 1 runs that many OpenMP threads (at most one per
 * sequence and TTT_APPLY_MAX_THREADS); 0 = the default, OpenMP's (the machine's cores, or
 * OMP_NUM_THREADS when set), which is what ttt_apply uses. */
ttt_status ttt_apply_threads(const ttt_cfg_node *layer_map, const ttt_st_file *in,
                             ttt_apply_out *out, int threads, ttt_error *err);
void ttt_apply_out_free(ttt_apply_out *out);

/* The whole command: read in_path, ttt_apply, write out_path (atomically). */
ttt_status ttt_apply_file(const ttt_cfg_node *layer_map, const char *in_path,
                          const char *out_path, ttt_error *err);
ttt_status ttt_apply_file_threads(const ttt_cfg_node *layer_map, const char *in_path,
                                  const char *out_path, int threads, ttt_error *err);

#endif
