/* The contract of the op table's backends (docs/device_ops.md "The contract suite"): every op
 * of the registry below runs forward and backward on the CPU and on CUDA device 0 on the same
 * inputs, and the CUDA results must match the CPU's within a bound derived from the inputs'
 * conditioning, and the CUDA gradients must match float64 central differences of the CPU op.
 * One run on a GPU machine prints one table line per op.
 *
 * What is compared. For each case the inputs x (float32) and an output weight w (the seed of
 * the backward, dL/dy for L = Σ w ⊙ y) are drawn once. The CPU op gives y and g = ∂L/∂x; its
 * Jacobian J (row i from a backward seeded with e_i, the case being small) gives the magnitude
 * scales
 *     S_i = |y_i| + Σ_j |J_ij|·|x_j|      (forward: for a product y = Σ a_k b_k this is Σ|a||b|)
 *     G_j = |g_j| + Σ_i |w_i|·|J_ij|      (backward: the same for the gradient's sum over i;
 *                                         ATTN adds its backward's terms before they cancel)
 * and the measures are max_i |y_cuda − y_cpu|_i / S_i and max_j |g_cuda − g_cpu|_j / G_j. The
 * bound is c·ε with ε = 2^-24 (float32's unit roundoff) and c by the op's class, both sides
 * being float32 computations each within a few roundings of S (resp. G):
 *     EXACT  c = 4:   copies, masks, sums of ≤ 2 terms, scalings: at most one rounding per side
 *                     (and the double-accumulated sums of the host), with room for two;
 *     TRANS  c = 16:  transcendental maps: the host's exp is a polynomial within 2 ulp, CUDA's
 *                     expf/logf/powf within 2 ulp; each is then multiplied and rounded again,
 *                     and the derivatives compose two or three such values;
 *     RED    c = 16:  reductions, norms, softmax, cross-entropy, convolution, RoPE: sums in
 *                     double on both sides (one final rounding) but scalars such as 1/σ or lse
 *                     rounded to float and then used in a product of up to four factors;
 *     GEMM   c = 2(k + 2), k the largest dimension of the case: cuBLAS and OpenBLAS both
 *                     accumulate in float32, each within γ_k·Σ|a||b| (Higham, Thm 3.5), plus
 *                     the roundings of alpha/beta;
 *     CHAIN  c = 6·2(k + 2): a composition of six ops (embedding, rmsnorm, matmul, silu, add,
 *                     cross-entropy) whose first-order errors add, each within the largest
 *                     class's bound (the product's).
 *     ATTN   c = 4·2(k + 2): the fused causal attention, a composition of the product q kᵀ
 *                     (float32 sums of Dk terms on the device), the scaling, the softmax (exp,
 *                     double sums, the rounded lse reused in the backward) and the product P v
 *                     (float32 sums of up to T terms), each within the product's bound; the host
 *                     op is exact to one rounding, so the device's errors are all of it. Its
 *                     backward scale G of q and k also holds the terms that the softmax backward
 *                     rounds before they cancel (attn_terms): J's entries for q and k are
 *                     scale·Σ_k p_ik (v_k − o_i) k_k, the cancellation done exactly inside the
 *                     absolute value, but the device rounds dP_ik = w_i·v_k and
 *                     D_i = Σ_k p_ik dP_ik apart before dS_ik = p_ik (dP_ik − D_i), so its
 *                     error scales with A_ik = p_ik (Σ_e|w_ie v_ke| + Σ_k' p_ik' Σ_e|w_ie v_k'e|)
 *                     and not with |dS_ik|, which is small where dP ≈ D. G_q adds
 *                     scale·Σ_k A_ik|k_k|, G_k adds scale·Σ_i A_ik|q_i|: tests/
 *                     test_cuda_attention.c bounds each of the kernels' roundings by ε times
 *                     such magnitudes (dP's by (Dv + 2)·ε·Σ_e|w_ie v_ke|, D's, dS's, then the
 *                     sums over T), and the unfused ops' softmax backward rounds the same
 *                     terms. dV = Pᵀ w has no cancellation: its G is the Jacobian's.
 *     SCAN   c = 2(T(m + 4) + m + 2): the recurrences (the LRU, the selective scan, the DPLR
 *                     delta rule; docs/device_ops.md "Recurrences"), T steps in which each state
 *                     element is formed with an inner float32 sum of m terms (m = 1 for the
 *                     LRU's complex product, N for the scan's read-out, max(d_k, d_v) for the
 *                     DPLR's u = a S and o = q S) and four more roundings (decay, input, their
 *                     sum, and exp's 2 ulp or the gate's rounding), errors of every step carried
 *                     to the output by the transitions, which do not grow in the cases' domains,
 *                     so that they add: (T(m + 4) + m)ε of the scale per side (the read-out's m),
 *                     plus the two of alpha/beta as GEMM, for two sides. The scale S holds them:
 *                     an output's dependence on the inputs of every earlier step is in J. The
 *                     backwards are the adjoint recurrences with the same structure (the host's
 *                     in double for the LRU, float32 for the others).
 * Non-finite CPU outputs (causal_fill's −∞) must be matched exactly.
 *
 * Finite differences (cases marked fd): for every input element, the float64 central differences
 * fd(h) and fd(h/2) of L evaluated with the CPU op (its float32 outputs summed in double), with
 * h = 1e-2·max(1, |x_j|); the CUDA gradient must lie within
 *     tol_j = 2·|fd(h) − fd(h/2)| + 2·16ε·Σ_i|w_i|·S_i / h + c·ε·G_j,
 * the first term bounding the truncation error of fd(h/2) (which shrinks as h², so it is a third
 * of the difference), the second the rounding of L's float32 terms amplified by 1/h (c = 16 as
 * in TRANS, for both evaluations), the third the rounding of the gradient itself. Ops with kinks
 * draw their inputs at least 0.2 from them, farther than h.
 *
 * Controls, each of which must be rejected: forward: the CUDA op on inputs with the element of
 * largest influence (Σ_i |J_ij|·|x_j|, its share of the scales S) scaled by 1 + 1e-3;
 * backward: the seed w with its element of largest influence (Σ_j |J_ij|) scaled by 1 + 1e-3;
 * finite differences: that seed element scaled by 1.1.
 *
 * Without a GPU (or without CUDA in the build) it prints why and exits 77 (ctest: skipped).
 * TTT_BACKEND_OPS_SELF=1 runs the whole harness with the CPU standing in for the device (every
 * error is then 0 and every control must still be rejected): a check of the harness itself on
 * machines without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "device.h"
#include "diagonal.h"
#include "dplr.h"
#include "ops.h"
#include "rope.h"
#include "tensor.h"

#define EPS32 5.9604644775390625e-8 /* 2^-24 */
#define MAX_IN 8

typedef enum { EXACT, TRANS, RED, GEMM, CHAIN, ATTN, SCAN } op_class;
typedef enum { D_SYM, D_POS, D_AWAY, D_AWAY1, D_LOGG, D_LTRI, D_NU, D_SMALL, D_LOGW } dom;

typedef enum {
    K_MATMUL, K_MATMUL_SELF, K_GEMM, K_OUTER, K_ADD, K_SUB, K_MUL, K_DIV, K_AXPBY, K_SCALE,
    K_ADD_SCALAR, K_SCALE_ROWS, K_SCALE_COLS, K_NEG, K_EXP, K_LOG, K_SQRT, K_SQUARE, K_SIGMOID,
    K_SILU, K_GELU, K_SOFTPLUS, K_ELU1, K_RELU, K_SILU_GRAD, K_GELU_GRAD, K_SIGN, K_ABS, K_CLAMP,
    K_POW, K_MAXIMUM, K_MINIMUM, K_SUM, K_MEAN, K_DOT, K_NORM_FRO, K_SUM_ROWS, K_SUM_COLS,
    K_ROW_NORMS, K_CUMSUM, K_LAYERNORM, K_RMSNORM, K_L2NORM, K_SOFTMAX, K_SOFTMAX_CAUSAL, K_TRIL,
    K_DECAY_MASK, K_CAUSAL_FILL, K_TRANSPOSE, K_SLICE_ROWS, K_CONCAT_ROWS, K_RESHAPE, K_SLICE_COLS,
    K_CONCAT_COLS, K_SLICE_BLOCK, K_CONCAT_GRID, K_EMBEDDING, K_CROSS_ENTROPY, K_CONV1D,
    K_CONV1D_SILU, K_ROPE, K_COPY, K_SOLVE_LOWER, K_LN_BACKWARD, K_CHAIN, K_ATTENTION,
    K_ATTENTION_QK, K_LRU, K_SSCAN, K_DPLR
} op_kind;

typedef struct op_case {
    const char *name;
    op_kind kind;
    op_class cls;
    int fd; /* checked against finite differences */
    int n_in;
    int ndim[MAX_IN];
    int shape[MAX_IN][4];
    dom dom[MAX_IN];
    int i0, i1;    /* integer parameters (transposes, ranges, k, strict, pos0) */
    float f0, f1;  /* scalar parameters */
    int n_int;     /* ids / targets */
    int ints[32];
    int fwd_only;  /* the device has the forward only (its backward is listed as missing) */
} op_case;

#define S1(a) 1, {a}
#define S2(a, b) 2, {a, b}
#define S3(a, b, c) 3, {a, b, c}

/* The registry: each op with a small input generator (shapes and domains). */
static const op_case CASES[] = {
    {"matmul", K_MATMUL, GEMM, 1, 2, {2, 2}, {{5, 7}, {7, 6}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"matmul(At,Bt)", K_MATMUL, GEMM, 1, 2, {2, 2}, {{7, 5}, {6, 7}}, {D_SYM, D_SYM}, 1, 1, 0, 0, 0, {0}, 0},
    {"matmul(3-D,2-D)", K_MATMUL, GEMM, 1, 2, {3, 2}, {{3, 4, 5}, {5, 3}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"matmul(2-D,3-D t)", K_MATMUL, GEMM, 1, 2, {2, 3}, {{4, 5}, {3, 6, 5}}, {D_SYM, D_SYM}, 0, 1, 0, 0, 0, {0}, 0},
    {"matmul(1-D,2-D)", K_MATMUL, GEMM, 1, 2, {1, 2}, {{6}, {6, 4}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"matmul(a,at)", K_MATMUL_SELF, GEMM, 1, 1, {2}, {{4, 6}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"gemm", K_GEMM, GEMM, 1, 3, {2, 2, 2}, {{6, 4}, {5, 6}, {4, 5}}, {D_SYM, D_SYM, D_SYM}, 1, 1, 0.7f, -1.3f, 0, {0}, 0},
    {"outer", K_OUTER, GEMM, 1, 2, {1, 2}, {{5}, {1, 4}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"add", K_ADD, EXACT, 1, 2, {2, 2}, {{4, 5}, {4, 5}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"add(row)", K_ADD, EXACT, 1, 2, {3, 1}, {{2, 3, 5}, {5}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"sub(scalar)", K_SUB, EXACT, 1, 2, {2, 1}, {{4, 5}, {1}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"mul", K_MUL, EXACT, 1, 2, {2, 2}, {{4, 5}, {4, 5}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"mul(row)", K_MUL, RED, 1, 2, {2, 2}, {{6, 5}, {1, 5}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"div", K_DIV, EXACT, 1, 2, {2, 2}, {{4, 5}, {4, 5}}, {D_SYM, D_POS}, 0, 0, 0, 0, 0, {0}, 0},
    {"div(scalar)", K_DIV, RED, 1, 2, {2, 1}, {{4, 5}, {1}}, {D_SYM, D_POS}, 0, 0, 0, 0, 0, {0}, 0},
    {"axpby", K_AXPBY, EXACT, 1, 2, {2, 2}, {{4, 5}, {4, 5}}, {D_SYM, D_SYM}, 0, 0, 0.5f, -2.0f, 0, {0}, 0},
    {"scale", K_SCALE, EXACT, 1, 1, {2}, {{4, 5}}, {D_SYM}, 0, 0, -1.7f, 0, 0, {0}, 0},
    {"add_scalar", K_ADD_SCALAR, EXACT, 1, 1, {2}, {{4, 5}}, {D_SYM}, 0, 0, 0.3f, 0, 0, {0}, 0},
    {"scale_rows", K_SCALE_ROWS, RED, 1, 2, {2, 1}, {{4, 5}, {4}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"scale_cols", K_SCALE_COLS, RED, 1, 2, {2, 1}, {{4, 5}, {5}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"neg", K_NEG, EXACT, 1, 1, {2}, {{4, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"exp", K_EXP, TRANS, 1, 1, {2}, {{4, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"log", K_LOG, TRANS, 1, 1, {2}, {{4, 5}}, {D_POS}, 0, 0, 0, 0, 0, {0}, 0},
    {"sqrt", K_SQRT, TRANS, 1, 1, {2}, {{4, 5}}, {D_POS}, 0, 0, 0, 0, 0, {0}, 0},
    {"square", K_SQUARE, EXACT, 1, 1, {2}, {{4, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"sigmoid", K_SIGMOID, TRANS, 1, 1, {2}, {{4, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"silu", K_SILU, TRANS, 1, 1, {2}, {{4, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"gelu", K_GELU, TRANS, 1, 1, {2}, {{4, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"softplus", K_SOFTPLUS, TRANS, 1, 1, {2}, {{4, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"elu1", K_ELU1, TRANS, 1, 1, {2}, {{4, 5}}, {D_AWAY}, 0, 0, 0, 0, 0, {0}, 0},
    {"relu", K_RELU, EXACT, 1, 1, {2}, {{4, 5}}, {D_AWAY}, 0, 0, 0, 0, 0, {0}, 0},
    {"silu_grad", K_SILU_GRAD, TRANS, 1, 1, {2}, {{4, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"gelu_grad", K_GELU_GRAD, TRANS, 1, 1, {2}, {{4, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"sign", K_SIGN, EXACT, 0, 1, {2}, {{4, 5}}, {D_AWAY}, 0, 0, 0, 0, 0, {0}, 0},
    {"abs", K_ABS, EXACT, 1, 1, {2}, {{4, 5}}, {D_AWAY}, 0, 0, 0, 0, 0, {0}, 0},
    {"clamp", K_CLAMP, EXACT, 1, 1, {2}, {{4, 5}}, {D_AWAY1}, 0, 0, -1.0f, 1.0f, 0, {0}, 0},
    {"pow_scalar", K_POW, TRANS, 1, 1, {2}, {{4, 5}}, {D_POS}, 0, 0, 1.7f, 0, 0, {0}, 0},
    {"maximum", K_MAXIMUM, EXACT, 1, 2, {2, 2}, {{4, 5}, {4, 5}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"minimum", K_MINIMUM, EXACT, 1, 2, {2, 2}, {{4, 5}, {4, 5}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"sum", K_SUM, RED, 1, 1, {2}, {{6, 7}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"mean", K_MEAN, RED, 1, 1, {3}, {{2, 3, 7}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"dot", K_DOT, RED, 1, 2, {1, 1}, {{20}, {20}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"norm_fro", K_NORM_FRO, RED, 1, 1, {2}, {{4, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"sum_rows", K_SUM_ROWS, RED, 1, 1, {2}, {{6, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"sum_cols", K_SUM_COLS, RED, 1, 1, {2}, {{6, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"row_norms", K_ROW_NORMS, RED, 1, 1, {2}, {{6, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"cumsum", K_CUMSUM, RED, 1, 1, {2}, {{9, 3}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"cumsum(1-D)", K_CUMSUM, RED, 1, 1, {1}, {{12}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"layernorm", K_LAYERNORM, RED, 1, 3, {2, 1, 1}, {{5, 8}, {8}, {8}}, {D_SYM, D_SYM, D_SYM}, 0, 0, 1e-5f, 0, 0, {0}, 0},
    {"layernorm(no g,b)", K_LAYERNORM, RED, 1, 1, {3}, {{2, 3, 8}}, {D_SYM}, 0, 0, 1e-5f, 0, 0, {0}, 0},
    {"rmsnorm", K_RMSNORM, RED, 1, 2, {2, 1}, {{5, 8}, {8}}, {D_SYM, D_SYM}, 0, 0, 1e-6f, 0, 0, {0}, 0},
    {"l2norm_rows", K_L2NORM, RED, 1, 1, {2}, {{5, 8}}, {D_SYM}, 0, 0, 1e-6f, 0, 0, {0}, 0},
    {"softmax_rows", K_SOFTMAX, RED, 1, 1, {2}, {{5, 8}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"softmax(causal_fill)", K_SOFTMAX_CAUSAL, RED, 1, 1, {3}, {{2, 6, 6}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"tril", K_TRIL, EXACT, 1, 1, {3}, {{2, 5, 6}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"tril(k=-1)", K_TRIL, EXACT, 1, 1, {2}, {{6, 6}}, {D_SYM}, -1, 0, 0, 0, 0, {0}, 0},
    {"decay_mask", K_DECAY_MASK, TRANS, 1, 1, {1}, {{7}}, {D_LOGG}, 0, 0, 0, 0, 0, {0}, 0},
    {"decay_mask(strict)", K_DECAY_MASK, TRANS, 1, 1, {1}, {{7}}, {D_LOGG}, 1, 0, 0, 0, 0, {0}, 0},
    {"causal_fill", K_CAUSAL_FILL, EXACT, 0, 1, {2}, {{6, 6}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"transpose", K_TRANSPOSE, EXACT, 1, 1, {2}, {{4, 7}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"transpose(3-D)", K_TRANSPOSE, EXACT, 1, 1, {3}, {{2, 3, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"slice_rows", K_SLICE_ROWS, EXACT, 1, 1, {2}, {{7, 4}}, {D_SYM}, 2, 5, 0, 0, 0, {0}, 0},
    {"concat_rows", K_CONCAT_ROWS, EXACT, 1, 3, {2, 2, 2}, {{2, 4}, {3, 4}, {1, 4}}, {D_SYM, D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"reshape", K_RESHAPE, EXACT, 1, 1, {2}, {{4, 6}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"slice_cols", K_SLICE_COLS, EXACT, 1, 1, {3}, {{2, 3, 7}}, {D_SYM}, 2, 6, 0, 0, 0, {0}, 0},
    {"concat_cols", K_CONCAT_COLS, EXACT, 1, 3, {2, 2, 2}, {{3, 2}, {3, 4}, {3, 1}}, {D_SYM, D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"slice_block", K_SLICE_BLOCK, EXACT, 1, 1, {2}, {{6, 7}}, {D_SYM}, 1, 4, 0, 0, 0, {0}, 0},
    {"concat_grid", K_CONCAT_GRID, EXACT, 1, 4, {2, 2, 2, 2}, {{2, 3}, {2, 1}, {3, 3}, {3, 1}}, {D_SYM, D_SYM, D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"embedding", K_EMBEDDING, EXACT, 1, 1, {2}, {{6, 4}}, {D_SYM}, 0, 0, 0, 0, 7, {3, 0, 5, 3, 1, 3, 2}, 0},
    {"cross_entropy", K_CROSS_ENTROPY, RED, 1, 1, {2}, {{6, 5}}, {D_SYM}, 0, 0, 0, 0, 6, {1, -1, 4, 0, 4, 2}, 0},
    {"conv1d_causal", K_CONV1D, RED, 1, 3, {3, 2, 1}, {{2, 6, 3}, {4, 3}, {3}}, {D_SYM, D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"conv1d_causal_silu", K_CONV1D_SILU, RED, 1, 2, {2, 2}, {{7, 3}, {4, 3}}, {D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"rope", K_ROPE, RED, 1, 1, {2}, {{5, 8}}, {D_SYM}, 3, 0, 10000.0f, 0, 0, {0}, 0},
    {"rope(odd d)", K_ROPE, RED, 1, 1, {2}, {{4, 7}}, {D_SYM}, -2, 0, 500.0f, 0, 0, {0}, 0},
    {"copy", K_COPY, EXACT, 1, 1, {2}, {{3, 5}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"solve_lower", K_SOLVE_LOWER, GEMM, 1, 2, {2, 2}, {{5, 5}, {5, 3}}, {D_LTRI, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"solve_lower(unit,1-D)", K_SOLVE_LOWER, GEMM, 1, 2, {2, 1}, {{6, 6}, {6}}, {D_LTRI, D_SYM}, 1, 0, 0, 0, 0, {0}, 0},
    /* a small language-model step: the tape with several device entries, a tensor used twice
     * (gradients accumulating), ids and targets on the device */
    {"chain(emb,rms,mm,silu,ce)", K_CHAIN, CHAIN, 1, 3, {2, 1, 2}, {{7, 6}, {6}, {6, 5}}, {D_SYM, D_SYM, D_SYM}, 0, 0, 0, 0, 16, {3, 0, 6, 3, 1, 5, 2, 4, 1, 4, -1, 0, 2, 3, 0, 4}, 0},
    /* the fused causal attention: two sequences of 70 tokens cross the kernels' 64-token tiles
     * (a full tile and a partial one on each side; its 700 outputs make the finite differences'
     * rounding term, 16ε·Σ|w|S/h, larger than the seed control's effect, so it is checked
     * against the CPU op's gradient, and the small cases against finite differences), a small
     * batch, a (T, D) one whose q and k are one tensor (the gradients of an input used twice),
     * and heads wider than the kernels' 128 columns (the unfused device ops) */
    {"attention_causal(T=70)", K_ATTENTION, ATTN, 0, 3, {3, 3, 3}, {{2, 70, 8}, {2, 70, 8}, {2, 70, 5}}, {D_SYM, D_SYM, D_SYM}, 0, 0, 0.6f, 0, 0, {0}, 0},
    {"attention_causal", K_ATTENTION, ATTN, 1, 3, {3, 3, 3}, {{2, 5, 4}, {2, 5, 4}, {2, 5, 2}}, {D_SYM, D_SYM, D_SYM}, 0, 0, 0.7f, 0, 0, {0}, 0},
    {"attention_causal(q=k)", K_ATTENTION_QK, ATTN, 1, 2, {2, 2}, {{7, 6}, {7, 2}}, {D_SYM, D_SYM}, 0, 0, 0.4f, 0, 0, {0}, 0},
    {"attention_causal(D=130)", K_ATTENTION, ATTN, 1, 3, {3, 3, 3}, {{1, 3, 130}, {1, 3, 130}, {1, 3, 4}}, {D_SYM, D_SYM, D_SYM}, 0, 0, 0.15f, 0, 0, {0}, 0},
    /* the recurrences (docs/device_ops.md "Recurrences"): the LRU with |λ| from 0.55 to 0.97
     * and an initial state; Mamba's selective scan with D and h0, and without; the DPLR delta
     * rule in chunks of 3 tokens (8 = 3 + 3 + 2: the saved chunk starts, the gates' drift
     * restarting), its final state as the output, and without a decay (w = 1) */
    {"lru", K_LRU, SCAN, 1, 4, {1, 1, 2, 1}, {{5}, {5}, {12, 10}, {10}}, {D_NU, D_SYM, D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"selective_scan", K_SSCAN, SCAN, 1, 7, {2, 2, 2, 2, 2, 1, 2}, {{8, 3}, {8, 3}, {3, 4}, {8, 4}, {8, 4}, {3}, {3, 4}}, {D_SYM, D_POS, D_SYM, D_SYM, D_SYM, D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"selective_scan(no D,h0)", K_SSCAN, SCAN, 1, 5, {2, 2, 2, 2, 2}, {{6, 2}, {6, 2}, {2, 3}, {6, 3}, {6, 3}}, {D_SYM, D_POS, D_SYM, D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"dplr_recurrent", K_DPLR, SCAN, 1, 7, {2, 2, 2, 2, 2, 2, 2}, {{8, 4}, {8, 4}, {8, 3}, {8, 4}, {8, 4}, {8, 4}, {4, 3}}, {D_SYM, D_SYM, D_SYM, D_SMALL, D_SMALL, D_LOGW, D_SYM}, 3, 0, 0, 0, 0, {0}, 0},
    {"dplr_recurrent(S_T)", K_DPLR, SCAN, 1, 7, {2, 2, 2, 2, 2, 2, 2}, {{7, 3}, {7, 3}, {7, 5}, {7, 3}, {7, 3}, {7, 3}, {3, 5}}, {D_SYM, D_SYM, D_SYM, D_SMALL, D_SMALL, D_LOGW, D_SYM}, 5, 1, 0, 0, 0, {0}, 0},
    {"dplr_recurrent(w=1)", K_DPLR, SCAN, 1, 6, {2, 2, 2, 2, 2, 2}, {{6, 3}, {6, 3}, {6, 2}, {6, 3}, {6, 3}, {3, 2}}, {D_SYM, D_SYM, D_SYM, D_SMALL, D_SMALL, D_SYM}, 4, 0, 0, 0, 0, {0}, 0},
    /* wider than one block of the kernels' threads, checked against the CPU op (as the long
     * attention case, their many outputs make the finite differences' rounding term too large
     * for the seed control): 600 LRU lanes' halves over 2 blocks, 320 (channel, state) pairs
     * over 2 blocks, and a DPLR head of 34 value columns over 2 warps (few key rows: with
     * inner sums of 40 terms the bound is larger than the control's effect) */
    {"lru(n=300)", K_LRU, SCAN, 0, 4, {1, 1, 2, 1}, {{300}, {300}, {3, 600}, {600}}, {D_NU, D_SYM, D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"selective_scan(d*N=320)", K_SSCAN, SCAN, 0, 7, {2, 2, 2, 2, 2, 1, 2}, {{4, 20}, {4, 20}, {20, 16}, {4, 16}, {4, 16}, {20}, {20, 16}}, {D_SYM, D_POS, D_SYM, D_SYM, D_SYM, D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"dplr_recurrent(dv=34)", K_DPLR, SCAN, 0, 7, {2, 2, 2, 2, 2, 2, 2}, {{5, 2}, {5, 2}, {5, 34}, {5, 2}, {5, 2}, {5, 2}, {2, 34}}, {D_SYM, D_SYM, D_SYM, D_SMALL, D_SMALL, D_LOGW, D_SYM}, 2, 0, 0, 0, 0, {0}, 0},
    /* sums over more rows and columns than one tile of the column-sum kernels (32 × 32,
     * docs/device_ops.md "Sums over rows"), neither a multiple of 32: a bias's and a
     * convolution's weight gradient */
    {"sum_rows(70x45)", K_SUM_ROWS, RED, 0, 1, {2}, {{70, 45}}, {D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"conv1d_causal(T=40,C=37)", K_CONV1D, RED, 0, 3, {3, 2, 1}, {{2, 40, 37}, {4, 37}, {37}}, {D_SYM, D_SYM, D_SYM}, 0, 0, 0, 0, 0, {0}, 0},
    {"layernorm_backward", K_LN_BACKWARD, RED, 0, 3, {2, 2, 1}, {{4, 8}, {4, 8}, {8}}, {D_SYM, D_SYM, D_SYM}, 0, 0, 1e-5f, 0, 0, {0}, 1},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* Ops of ops.h without a CUDA implementation yet (docs/device_ops.md), listed in the table. */
static const char *const NO_CUDA[] = {"layernorm_backward (its backward: recorded on a device)"};

static ttt_tensor *build(ttt_ctx *ctx, const op_case *c, ttt_tensor **in, const int *ints) {
    ttt_tensor *a = in[0], *b = c->n_in > 1 ? in[1] : NULL;
    switch (c->kind) {
    case K_MATMUL: return ttt_matmul(ctx, a, c->i0, b, c->i1);
    case K_MATMUL_SELF: return ttt_matmul(ctx, a, 0, a, 1);
    case K_GEMM: return ttt_gemm(ctx, c->f0, a, c->i0, b, c->i1, c->f1, in[2]);
    case K_OUTER: return ttt_outer(ctx, a, b);
    case K_ADD: return ttt_add(ctx, a, b);
    case K_SUB: return ttt_sub(ctx, a, b);
    case K_MUL: return ttt_mul(ctx, a, b);
    case K_DIV: return ttt_div(ctx, a, b);
    case K_AXPBY: return ttt_axpby(ctx, c->f0, a, c->f1, b);
    case K_SCALE: return ttt_scale(ctx, a, c->f0);
    case K_ADD_SCALAR: return ttt_add_scalar(ctx, a, c->f0);
    case K_SCALE_ROWS: return ttt_scale_rows(ctx, a, b);
    case K_SCALE_COLS: return ttt_scale_cols(ctx, a, b);
    case K_NEG: return ttt_neg(ctx, a);
    case K_EXP: return ttt_exp(ctx, a);
    case K_LOG: return ttt_log(ctx, a);
    case K_SQRT: return ttt_sqrt(ctx, a);
    case K_SQUARE: return ttt_square(ctx, a);
    case K_SIGMOID: return ttt_sigmoid(ctx, a);
    case K_SILU: return ttt_silu(ctx, a);
    case K_GELU: return ttt_gelu(ctx, a);
    case K_SOFTPLUS: return ttt_softplus(ctx, a);
    case K_ELU1: return ttt_elu1(ctx, a);
    case K_RELU: return ttt_relu(ctx, a);
    case K_SILU_GRAD: return ttt_silu_grad(ctx, a);
    case K_GELU_GRAD: return ttt_gelu_grad(ctx, a);
    case K_SIGN: return ttt_sign(ctx, a);
    case K_ABS: return ttt_abs(ctx, a);
    case K_CLAMP: return ttt_clamp(ctx, a, c->f0, c->f1);
    case K_POW: return ttt_pow_scalar(ctx, a, c->f0);
    case K_MAXIMUM: return ttt_maximum(ctx, a, b);
    case K_MINIMUM: return ttt_minimum(ctx, a, b);
    case K_SUM: return ttt_sum(ctx, a);
    case K_MEAN: return ttt_mean(ctx, a);
    case K_DOT: return ttt_dot(ctx, a, b);
    case K_NORM_FRO: return ttt_norm_fro(ctx, a);
    case K_SUM_ROWS: return ttt_sum_rows(ctx, a);
    case K_SUM_COLS: return ttt_sum_cols(ctx, a);
    case K_ROW_NORMS: return ttt_row_norms(ctx, a);
    case K_CUMSUM: return ttt_cumsum(ctx, a);
    case K_LAYERNORM:
        return ttt_layernorm(ctx, a, b, c->n_in > 2 ? in[2] : NULL, c->f0);
    case K_RMSNORM: return ttt_rmsnorm(ctx, a, b, c->f0);
    case K_L2NORM: return ttt_l2norm_rows(ctx, a, c->f0);
    case K_SOFTMAX: return ttt_softmax_rows(ctx, a);
    case K_SOFTMAX_CAUSAL: return ttt_softmax_rows(ctx, ttt_causal_fill(ctx, a));
    case K_TRIL: return ttt_tril(ctx, a, c->i0);
    case K_DECAY_MASK: return ttt_decay_mask(ctx, a, c->i0);
    case K_CAUSAL_FILL: return ttt_causal_fill(ctx, a);
    case K_TRANSPOSE: return ttt_transpose(ctx, a);
    case K_SLICE_ROWS: return ttt_slice_rows(ctx, a, c->i0, c->i1);
    case K_CONCAT_ROWS:
        return ttt_concat_rows_n(ctx, (const ttt_tensor *const[]){in[0], in[1], in[2]}, 3);
    case K_RESHAPE: return ttt_reshape(ctx, a, 3, (int[]){2, 3, 4});
    case K_SLICE_COLS: return ttt_slice_cols(ctx, a, c->i0, c->i1);
    case K_CONCAT_COLS:
        return ttt_concat_cols_n(ctx, (const ttt_tensor *const[]){in[0], in[1], in[2]}, 3);
    case K_SLICE_BLOCK: return ttt_slice_block(ctx, a, c->i0, c->i1, 2, 6);
    case K_CONCAT_GRID:
        return ttt_concat_grid(ctx, (const ttt_tensor *const[]){in[0], in[1], in[2], in[3]}, 2,
                               2);
    case K_EMBEDDING: return ttt_embedding(ctx, a, ints, c->n_int);
    case K_CROSS_ENTROPY: return ttt_cross_entropy(ctx, a, ints, c->n_int, NULL);
    case K_CONV1D: return ttt_conv1d_causal(ctx, a, b, in[2]);
    case K_CONV1D_SILU: return ttt_conv1d_causal_silu(ctx, a, b);
    case K_ROPE: return ttt_rope(ctx, a, c->i0, c->f0);
    case K_COPY: return ttt_tensor_copy(ctx, a);
    case K_SOLVE_LOWER: return ttt_solve_lower(ctx, a, b, c->i0);
    case K_LN_BACKWARD: return ttt_layernorm_backward(ctx, a, b, in[2], c->f0);
    case K_ATTENTION: return ttt_attention_causal(ctx, a, b, in[2], c->f0);
    case K_ATTENTION_QK: return ttt_attention_causal(ctx, a, a, b, c->f0);
    case K_LRU: return ttt_lru_op(ctx, a, b, in[2], in[3], 1);
    case K_SSCAN:
        return ttt_selective_scan_op(ctx, a, b, in[2], in[3], in[4], c->n_in > 5 ? in[5] : NULL,
                                     c->n_in > 6 ? in[6] : NULL, 1);
    case K_DPLR: { /* n_in 7: log w = in[5]; 6: none (w = 1); i0: the chunk; i1: S_T out */
        const int lw = c->n_in == 7;
        ttt_tensor *S = NULL;
        ttt_tensor *o = ttt_dplr_recurrent_op(ctx, &S, a, b, in[2], in[3], in[4],
                                              lw ? in[5] : NULL, in[lw ? 6 : 5], c->i0);
        return c->i1 ? S : o;
    }
    case K_CHAIN: {
        const int n = c->n_int / 2; /* ints: n ids, then n targets */
        ttt_tensor *h = ttt_rmsnorm(ctx, ttt_embedding(ctx, a, ints, n), b, 1e-6f);
        ttt_tensor *z = ttt_matmul(ctx, h, 0, in[2], 0);
        return ttt_cross_entropy(ctx, ttt_add(ctx, ttt_silu(ctx, z), z), ints + n, n, NULL);
    }
    }
    return NULL;
}

/* ---- inputs ---- */

static uint64_t rng_s;
static double urand(void) { /* splitmix64 → [0, 1) */
    uint64_t z = (rng_s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

static float draw(dom d, size_t j, size_t cols) {
    const double u = urand(), sg = urand() < 0.5 ? -1.0 : 1.0;
    switch (d) {
    case D_POS: return (float)(0.5 + 1.5 * u);
    case D_AWAY: return (float)(sg * (0.2 + 1.8 * u)); /* kinks at 0 */
    case D_AWAY1: /* kinks at 0 and ±1 */
        return (float)(sg * (u < 0.5 ? 0.2 + 1.2 * u : 1.2 + 1.6 * (u - 0.5)));
    case D_LOGG: return (float)(-0.3 * (double)j - 0.2 * u); /* cumulative log gates */
    case D_NU: return (float)(-0.5 - 3.0 * u);         /* LRU: |λ| = exp(−e^ν) in [0.55, 0.97] */
    case D_SMALL: return (float)(0.4 * (2.0 * u - 1.0)); /* DPLR's a, b: |bᵀa| ≤ 0.64 at d_k 4 */
    case D_LOGW: return (float)(-0.05 - 0.6 * u);        /* DPLR's log w, RWKV-7's range */
    case D_LTRI: /* a well-conditioned triangular factor: diagonal in [1.5, 2], the rest small */
        return j / cols == j % cols ? (float)(1.5 + 0.5 * u) : (float)(0.3 * (2.0 * u - 1.0));
    default: return (float)(2.0 * u - 1.0);
    }
}

static size_t numel(const op_case *c, int i) {
    size_t n = 1;
    for (int d = 0; d < c->ndim[i]; d++) n *= (size_t)c->shape[i][d];
    return n;
}

/* ---- one evaluation: y and the gradients of Σ w ⊙ y, on the host or the device ---- */

typedef struct run_out {
    float *y;
    size_t ny;
    int ndim, shape[4];
    float *g[MAX_IN]; /* NULL when the op gave the input no gradient (all zero) */
} run_out;

static void run_out_free(run_out *r) {
    free(r->y);
    for (int i = 0; i < MAX_IN; i++) free(r->g[i]);
    memset(r, 0, sizeof *r);
}

typedef struct harness {
    ttt_arena host, dev;
    int self; /* the CPU stands in for the device */
    ttt_error err;
} harness;

/* Evaluates the case on `arena` (host or device). w == NULL: forward only. With a Jacobian
 * request (jac != NULL, host only), the backward is run once per output element seeded with
 * e_i and J[i·nx + offset_k + j] receives ∂y_i/∂x_kj. Returns 0 on a device error (printed). */
static int evaluate(harness *h, ttt_arena *arena, const op_case *c, float *const *x,
                    const float *w, run_out *out, double *jac, size_t nx) {
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = arena, .grad = w != NULL || jac != NULL, .tape = &tape};
    const int on_dev = !ttt_device_is_host(arena->device);
    ttt_arena_mark m0 = ttt_arena_mark_get(arena);
    ttt_tensor *in[MAX_IN] = {0};
    for (int i = 0; i < c->n_in; i++) {
        ttt_tensor v = ttt_tensor_view(x[i], c->ndim[i], c->shape[i]);
        in[i] = ttt_tensor_to(&ctx, &v);
        in[i]->requires_grad = 1;
    }
    const int *ints = c->ints;
    if (on_dev && c->n_int) {
        int *d = ttt_arena_alloc(arena, (size_t)c->n_int * sizeof(int));
        ttt_device_copy(d, arena->device, c->ints, ttt_device_host(), (size_t)c->n_int * sizeof(int),
                        arena->stream, &h->err);
        ints = d;
    }
    ttt_tensor *y = build(&ctx, c, in, ints);
    memset(out, 0, sizeof *out);
    out->ny = y->n;
    out->ndim = y->ndim;
    memcpy(out->shape, y->shape, sizeof out->shape);
    out->y = malloc((y->n ? y->n : 1) * sizeof(float));
    ttt_tensor_read(y, out->y, arena->stream, &h->err);
    if (w && y->requires_grad) {
        const float *seed = w;
        if (on_dev) {
            ttt_tensor wv = ttt_tensor_view((float *)w, y->ndim, y->shape);
            seed = ttt_tensor_to(&ctx, &wv)->data;
        }
        ttt_backward_from(&ctx, y, seed);
        for (int i = 0; i < c->n_in; i++) {
            if (!in[i]->grad) continue;
            out->g[i] = malloc(in[i]->n * sizeof(float));
            ttt_tensor gv = ttt_tensor_view_on(ttt_tensor_device(in[i]), in[i]->grad, in[i]->ndim,
                                               in[i]->shape);
            ttt_tensor_read(&gv, out->g[i], arena->stream, &h->err);
        }
    }
    if (jac && y->requires_grad) {
        float *e = calloc(y->n, sizeof(float));
        for (size_t i = 0; i < y->n; i++) {
            e[i] = 1.0f;
            ttt_backward_from(&ctx, y, e);
            e[i] = 0.0f;
            size_t off = 0;
            for (int k = 0; k < c->n_in; k++) {
                for (size_t j = 0; j < in[k]->n; j++)
                    jac[i * nx + off + j] = in[k]->grad ? in[k]->grad[j] : 0.0;
                off += in[k]->n;
            }
        }
        free(e);
    }
    ttt_tape_free(&tape);
    ttt_arena_release(arena, m0);
    ttt_error e2;
    if (ttt_device_ops_status(&e2) != TTT_OK) {
        printf("  %s: device error: %s\n", c->name, e2.msg);
        return 0;
    }
    return 1;
}

/* max_i |got_i − ref_i| / scale_i; a non-finite reference must be matched exactly. */
static double max_rel(const float *got, const float *ref, const double *scale, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ref[i])) {
            if (!(got[i] == ref[i])) return INFINITY;
            continue;
        }
        const double d = fabs((double)got[i] - ref[i]);
        const double r = scale[i] > 0.0 ? d / scale[i] : (d > 0.0 ? INFINITY : 0.0);
        if (!(r <= worst)) worst = r; /* NaN becomes the worst */
    }
    return worst;
}

static double class_c(const op_case *c) {
    switch (c->cls) {
    case EXACT: return 4.0;
    case TRANS: return 16.0;
    case RED: return 16.0;
    case GEMM:
    case CHAIN:
    case ATTN: {
        int k = 1;
        for (int i = 0; i < c->n_in; i++)
            for (int d = 0; d < c->ndim[i]; d++) k = c->shape[i][d] > k ? c->shape[i][d] : k;
        /* GEMM: one product; CHAIN: six ops; ATTN: four */
        return (c->cls == GEMM ? 1.0 : c->cls == CHAIN ? 6.0 : 4.0) * 2.0 * (k + 2);
    }
    case SCAN: {
        /* T steps of a recurrence whose state elements each take m + 4 roundings per step
         * (an inner sum of m terms, then the decay, the input and their sum), all adding up
         * along the steps (the cases' transitions do not grow), then a read-out sum of m
         * terms; each side within that many ε of the scale, two sides: the header's "SCAN" */
        int T = 0, m = 1;
        if (c->kind == K_LRU) T = c->shape[2][0];
        if (c->kind == K_SSCAN) T = c->shape[0][0], m = c->shape[3][1];
        if (c->kind == K_DPLR) {
            T = c->shape[0][0];
            m = c->shape[0][1] > c->shape[2][1] ? c->shape[0][1] : c->shape[2][1];
        }
        return 2.0 * (T * (m + 4.0) + m + 2.0);
    }
    }
    return 4.0;
}

/* ATTN's addition to the backward scale G (the header's "ATTN"): the magnitudes of the terms
 * of dS_ik = p_ik (dP_ik − D_i) as the device rounds them, A_ik = p_ik (a_ik + Σ_k' p_ik' a_ik')
 * with a_ik = Σ_e |w_ie v_ke| (dP_ik = Σ_e w_ie v_ke and D_i = Σ_k p_ik dP_ik, each rounded
 * before the difference: src/core/cuda/ops_attention.cu), carried to q and k as dQ = scale·dS K
 * and dK = scale·dSᵀ Q carry dS. In double from the float inputs; q = k (K_ATTENTION_QK, one
 * tensor) gets both. */
static void attn_terms(const op_case *c, float *const *x, const float *w, double *G,
                       const size_t *off) {
    const int qk = c->kind == K_ATTENTION_QK, iv = qk ? 1 : 2, nd = c->ndim[0];
    const int B = nd == 3 ? c->shape[0][0] : 1, T = c->shape[0][nd - 2];
    const int dk = c->shape[0][nd - 1], dv = c->shape[iv][nd - 1];
    const double scale = c->f0;
    double *p = malloc((size_t)T * sizeof(double)), *a = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++) {
        const size_t q0 = (size_t)b * T * dk, v0 = (size_t)b * T * dv;
        const float *q = x[0] + q0, *k = x[qk ? 0 : 1] + q0, *v = x[iv] + v0, *wb = w + v0;
        double *Gq = G + off[0] + q0, *Gk = G + off[qk ? 0 : 1] + q0;
        for (int i = 0; i < T; i++) {
            const float *qi = q + (size_t)i * dk, *wi = wb + (size_t)i * dv;
            double m = -INFINITY, l = 0.0, dm = 0.0;
            for (int j = 0; j <= i; j++) { /* p_ij, a_ij and Σ_j p_ij a_ij */
                double s = 0.0;
                for (int e = 0; e < dk; e++) s += (double)qi[e] * k[(size_t)j * dk + e];
                p[j] = scale * s;
                m = fmax(m, p[j]);
            }
            for (int j = 0; j <= i; j++) l += exp(p[j] - m);
            for (int j = 0; j <= i; j++) {
                p[j] = exp(p[j] - m) / l;
                a[j] = 0.0;
                for (int e = 0; e < dv; e++) a[j] += fabs((double)wi[e] * v[(size_t)j * dv + e]);
                dm += p[j] * a[j];
            }
            for (int j = 0; j <= i; j++) {
                const double A = scale * p[j] * (a[j] + dm); /* scale·A_ij */
                for (int e = 0; e < dk; e++) {
                    Gq[(size_t)i * dk + e] += A * fabs(k[(size_t)j * dk + e]);
                    Gk[(size_t)j * dk + e] += A * fabs(qi[e]);
                }
            }
        }
    }
    free(p);
    free(a);
}

static double loss_of(const run_out *r, const float *w) {
    double s = 0.0;
    for (size_t i = 0; i < r->ny; i++)
        if (isfinite(r->y[i])) s += (double)w[i] * r->y[i];
    return s;
}

typedef struct row_result {
    double fwd, bwd, fd;          /* measured / bound (≤ 1 passes) */
    int fwd_ctl, bwd_ctl, fd_ctl; /* the control was rejected */
    int ok;
} row_result;

static row_result run_case(harness *h, const op_case *c, int *failures) {
    row_result rr = {0, 0, 0, 1, 1, 1, 1};
    float *x[MAX_IN] = {0};
    size_t nx = 0, off[MAX_IN];
    for (int i = 0; i < c->n_in; i++) {
        const size_t n = numel(c, i);
        x[i] = malloc(n * sizeof(float));
        for (size_t j = 0; j < n; j++)
            x[i][j] = draw(c->dom[i], j, (size_t)c->shape[i][c->ndim[i] - 1]);
        off[i] = nx;
        nx += n;
    }
    ttt_arena *dev = h->self ? &h->host : &h->dev;
    /* CPU: y, then the seed w, the gradients and the Jacobian */
    run_out cpu, gpu, ctl;
    evaluate(h, &h->host, c, x, NULL, &cpu, NULL, 0);
    const size_t ny = cpu.ny;
    float *w = malloc((ny ? ny : 1) * sizeof(float));
    for (size_t i = 0; i < ny; i++) w[i] = (float)(2.0 * urand() - 1.0);
    run_out_free(&cpu);
    double *J = calloc(ny * nx + 1, sizeof(double));
    evaluate(h, &h->host, c, x, w, &cpu, J, nx);
    /* magnitude scales S (outputs) and G (inputs), and the most influential input and output */
    double *S = calloc(ny + 1, sizeof(double)), *G = calloc(nx + 1, sizeof(double));
    size_t jbest = 0, ibest = 0;
    double jinf = -1.0, iinf = -1.0;
    for (size_t i = 0; i < ny; i++) {
        double s = isfinite(cpu.y[i]) ? fabs(cpu.y[i]) : 0.0, row = 0.0;
        for (int k = 0; k < c->n_in; k++)
            for (size_t j = 0; j < numel(c, k); j++) {
                const double a = fabs(J[i * nx + off[k] + j]);
                s += a * fabs(x[k][j]);
                G[off[k] + j] += fabs(w[i]) * a;
                row += a;
            }
        S[i] = s;
        if (row > iinf) iinf = row, ibest = i;
    }
    for (int k = 0; k < c->n_in; k++)
        for (size_t j = 0; j < numel(c, k); j++) {
            double col = 0.0;
            for (size_t i = 0; i < ny; i++) col += fabs(J[i * nx + off[k] + j]) * fabs(x[k][j]);
            if (col > jinf) jinf = col, jbest = off[k] + j;
            if (cpu.g[k]) G[off[k] + j] += fabs(cpu.g[k][j]);
        }
    if (c->cls == ATTN) attn_terms(c, x, w, G, off);
    const double bound = class_c(c) * EPS32;

    /* the device against the CPU */
    int dev_ok = evaluate(h, dev, c, x, c->fwd_only ? NULL : w, &gpu, NULL, 0);
    rr.fwd = max_rel(gpu.y, cpu.y, S, ny) / bound;
    float *zeros = calloc(nx + 1, sizeof(float));
    rr.bwd = 0.0;
    for (int k = 0; k < c->n_in; k++) {
        const float *a = gpu.g[k] ? gpu.g[k] : zeros, *b = cpu.g[k] ? cpu.g[k] : zeros;
        const double r = max_rel(a, b, G + off[k], numel(c, k)) / bound;
        if (!(r <= rr.bwd)) rr.bwd = r;
    }
    /* forward control: the most influential input element × (1 + 1e-3), or negated when the
     * op is locally constant (J = 0: sign) */
    const int constant = jinf <= 0.0;
    {
        int k = 0;
        while (k + 1 < c->n_in && jbest >= off[k + 1]) k++;
        const float keep = x[k][jbest - off[k]];
        x[k][jbest - off[k]] = constant ? -keep : keep * (1.0f + 1e-3f);
        evaluate(h, dev, c, x, NULL, &ctl, NULL, 0);
        x[k][jbest - off[k]] = keep;
        rr.fwd_ctl = max_rel(ctl.y, cpu.y, S, ny) / bound > 1.0;
        run_out_free(&ctl);
    }
    /* backward control: the most influential seed element × (1 + 1e-3) */
    run_out gctl;
    if (!c->fwd_only) {
        const float keep = w[ibest];
        w[ibest] = keep * (1.0f + 1e-3f);
        evaluate(h, dev, c, x, w, &gctl, NULL, 0);
        w[ibest] = keep;
        /* a locally constant op's gradient is 0 whatever the seed: the control is then the
         * device gradient off by the smallest amount, which a scale of G = 0 must reject */
        if (constant && gctl.g[0]) gctl.g[0][0] += 1e-30f;
        double r = 0.0;
        for (int k = 0; k < c->n_in; k++) {
            const float *a = gctl.g[k] ? gctl.g[k] : zeros, *b = cpu.g[k] ? cpu.g[k] : zeros;
            const double q = max_rel(a, b, G + off[k], numel(c, k)) / bound;
            if (!(q <= r)) r = q;
        }
        rr.bwd_ctl = r > 1.0;
        run_out_free(&gctl);
    }
    /* finite differences of the CPU op in float64 against the device gradient, and the control
     * (seed element × 1.1) */
    if (c->fd && !c->fwd_only) {
        double wS = 0.0;
        for (size_t i = 0; i < ny; i++) wS += fabs(w[i]) * S[i];
        float *w2 = malloc((ny ? ny : 1) * sizeof(float));
        memcpy(w2, w, (ny ? ny : 1) * sizeof(float));
        w2[ibest] *= 1.1f;
        run_out g2;
        evaluate(h, dev, c, x, w2, &g2, NULL, 0);
        double worst = 0.0, worst_ctl = 0.0;
        for (int k = 0; k < c->n_in; k++)
            for (size_t j = 0; j < numel(c, k); j++) {
                const float keep = x[k][j];
                const double hh = 1e-2 * fmax(1.0, fabs(keep));
                double fdv[2];
                for (int s = 0; s < 2; s++) {
                    const double step = s ? hh / 2 : hh;
                    run_out p, m;
                    x[k][j] = (float)(keep + step);
                    const double xp = x[k][j];
                    evaluate(h, &h->host, c, x, NULL, &p, NULL, 0);
                    x[k][j] = (float)(keep - step);
                    const double xm = x[k][j];
                    evaluate(h, &h->host, c, x, NULL, &m, NULL, 0);
                    /* divide by the steps actually taken (x ± step rounded to float) */
                    fdv[s] = (loss_of(&p, w) - loss_of(&m, w)) / (xp - xm);
                    run_out_free(&p);
                    run_out_free(&m);
                }
                x[k][j] = keep;
                const double tol =
                    2.0 * fabs(fdv[0] - fdv[1]) + 2.0 * 16.0 * EPS32 * wS / hh +
                    class_c(c) * EPS32 * G[off[k] + j];
                const double got = gpu.g[k] ? gpu.g[k][j] : 0.0;
                const double got2 = g2.g[k] ? g2.g[k][j] : 0.0;
                const double r = fabs(got - fdv[1]) / tol, r2 = fabs(got2 - fdv[1]) / tol;
                if (!(r <= worst)) worst = r;
                if (!(r2 <= worst_ctl)) worst_ctl = r2;
            }
        rr.fd = worst;
        rr.fd_ctl = worst_ctl > 1.0;
        run_out_free(&g2);
        free(w2);
    }
    if (c->fwd_only) rr.bwd = 0.0;
    rr.ok = dev_ok && rr.fwd <= 1.0 && rr.bwd <= 1.0 && rr.fd <= 1.0 && rr.fwd_ctl &&
            rr.bwd_ctl && (!c->fd || rr.fd_ctl);
    /* a control can only be rejected where the output depends on the perturbed value: an op
     * whose every output ignores its inputs' values (none here) would say so */
    if (!rr.ok) ++*failures;
    run_out_free(&cpu);
    run_out_free(&gpu);
    free(zeros);
    free(J);
    free(S);
    free(G);
    free(w);
    for (int i = 0; i < c->n_in; i++) free(x[i]);
    return rr;
}

/* The cross-entropy that consumes its logits (ops.h ttt_cross_entropy_consume) against the one
 * that does not, on the same backend: logits = x·W (6 × 4 times 4 × 5, a ignored row among the
 * targets), one backward each. The gradients of x and W must be the same bits (the same kernel,
 * only the buffer differs), the consuming backward must take exactly the logits' size less
 * gradient memory, and the logits' values must have been overwritten (the control: the
 * in-place path ran). Not a row of the table above: its Jacobian runs the backward once per
 * output, and a consumed tensor serves one backward. */
static int consume_case(harness *h, ttt_arena *arena) {
    enum { N = 6, D = 4, V = 5 };
    static const int tg[N] = {1, -1, 4, 0, 4, 2};
    float x[N * D], w[D * V];
    for (int i = 0; i < N * D; i++) x[i] = draw(D_SYM, (size_t)i, D);
    for (int i = 0; i < D * V; i++) w[i] = draw(D_SYM, (size_t)i, V);
    const int on_dev = !ttt_device_is_host(arena->device);
    float g[2][2][N * D + D * V], z0[N * V], z1[N * V];
    size_t bytes[2];
    for (int k = 0; k < 2; k++) {
        ttt_tape tape;
        ttt_tape_init(&tape);
        ttt_ctx ctx = {.arena = arena, .grad = 1, .tape = &tape};
        ttt_arena_mark m0 = ttt_arena_mark_get(arena);
        ttt_tensor xv = ttt_tensor_view(x, 2, (int[]){N, D}), wv = ttt_tensor_view(w, 2, (int[]){D, V});
        ttt_tensor *xt = ttt_tensor_to(&ctx, &xv), *wt = ttt_tensor_to(&ctx, &wv);
        xt->requires_grad = wt->requires_grad = 1;
        const int *ids = tg;
        if (on_dev) {
            int *d = ttt_arena_alloc(arena, sizeof tg);
            ttt_device_copy(d, arena->device, tg, ttt_device_host(), sizeof tg, arena->stream,
                            &h->err);
            ids = d;
        }
        ttt_tensor *z = ttt_matmul(&ctx, xt, 0, wt, 0);
        ttt_tensor_read(z, z0, arena->stream, &h->err);
        ttt_tensor *l = k ? ttt_cross_entropy_consume(&ctx, z, ids, N, NULL)
                          : ttt_cross_entropy(&ctx, z, ids, N, NULL);
        ttt_backward(&ctx, l);
        bytes[k] = tape.grad_bytes;
        ttt_tensor gx = ttt_tensor_view_on(arena->device, xt->grad, 2, (int[]){N, D});
        ttt_tensor gw = ttt_tensor_view_on(arena->device, wt->grad, 2, (int[]){D, V});
        ttt_tensor_read(&gx, g[k][0], arena->stream, &h->err);
        ttt_tensor_read(&gw, g[k][1], arena->stream, &h->err);
        ttt_tensor_read(z, z1, arena->stream, &h->err);
        ttt_tape_free(&tape);
        ttt_arena_release(arena, m0);
    }
    ttt_error e2;
    const int dev_ok = ttt_device_ops_status(&e2) == TTT_OK;
    const int same = memcmp(g[0][0], g[1][0], sizeof(float) * N * D) == 0 &&
                     memcmp(g[0][1], g[1][1], sizeof(float) * D * V) == 0;
    const int fewer = bytes[0] - bytes[1] == sizeof(float) * N * V;
    const int overwritten = memcmp(z0, z1, sizeof z0) != 0; /* z1: the consuming run's */
    const int ok = dev_ok && same && fewer && overwritten;
    printf("%-22s gradients %s, gradient bytes %zu against %zu (%s), logits %s  %s\n",
           "cross_entropy_consume", same ? "same bits" : "DIFFER", bytes[1], bytes[0],
           fewer ? "N·V·4 fewer" : "NOT N·V·4 fewer", overwritten ? "overwritten" : "NOT overwritten",
           ok ? "ok" : dev_ok ? "FAIL" : e2.msg);
    return ok;
}

int main(void) {
    harness h;
    memset(&h, 0, sizeof h);
    const char *self = getenv("TTT_BACKEND_OPS_SELF");
    h.self = self && *self && strcmp(self, "0") != 0;
    ttt_arena_init(&h.host, 0);
    if (!h.self) {
        if (!ttt_device_cuda_built()) {
            printf("skipped: built without CUDA (configure with -DTTT_CUDA=ON)\n");
            return 77;
        }
        ttt_error err;
        if (ttt_device_usable(ttt_device_cuda(0), &err) != TTT_OK) {
            printf("skipped: no usable CUDA device: %s\n", err.msg);
            return 77;
        }
        if (ttt_arena_init_device(&h.dev, 1 << 20, ttt_device_cuda(0), NULL, &err) != TTT_OK) {
            printf("cuda:0 arena: %s\n", err.msg);
            return 1;
        }
    }
    rng_s = 0x5EEDBA5Eu;
    printf("%s against the CPU ops; err/bound ≤ 1 passes (bound = c·ε·scale, tests/test_backend_ops.c)\n",
           h.self ? "host (self-check of the harness)" : "cuda:0");
    printf("%-22s %5s %12s %12s %12s  %s\n", "op", "c", "fwd err/bnd", "bwd err/bnd",
           "fd err/tol", "controls fwd/bwd/fd rejected, result");
    int failures = 0;
    for (int i = 0; i < N_CASES; i++) {
        const op_case *c = &CASES[i];
        row_result r = run_case(&h, c, &failures);
        char fd[32];
        if (c->fd)
            snprintf(fd, sizeof fd, "%12.3g", r.fd);
        else
            snprintf(fd, sizeof fd, "%12s", "-");
        char bwd[32];
        if (c->fwd_only)
            snprintf(bwd, sizeof bwd, "%12s", "-");
        else
            snprintf(bwd, sizeof bwd, "%12.3g", r.bwd);
        printf("%-22s %5.0f %12.3g %s %s  %s/%s/%s  %s\n", c->name, class_c(c), r.fwd, bwd, fd,
               r.fwd_ctl ? "yes" : "NO", c->fwd_only ? "-" : r.bwd_ctl ? "yes" : "NO",
               c->fd ? (r.fd_ctl ? "yes" : "NO") : "-", r.ok ? "ok" : "FAIL");
        fflush(stdout);
    }
    if (!consume_case(&h, h.self ? &h.host : &h.dev)) failures++;
    for (size_t i = 0; i < sizeof NO_CUDA / sizeof NO_CUDA[0]; i++)
        printf("%-22s no CUDA implementation yet\n", NO_CUDA[i]);
    printf("%d of %d cases failed\n", failures, N_CASES);
    ttt_arena_free(&h.host);
    if (!h.self) ttt_arena_free(&h.dev);
    return failures ? 1 : 0;
}
