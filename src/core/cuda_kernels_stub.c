/* The kernels of cuda_kernels.h in a build without CUDA: every entry refuses with the reason.
 * Nothing reaches them (a device arena, hence a device tensor, cannot be made without CUDA);
 * they exist so that the device half of the op table links in every build. */
#include "cuda_kernels.h"

#ifndef TTT_HAVE_CUDA

#define NO_CUDA(err) ttt_error_set((err), TTT_ERR_UNSUPPORTED, "this build has no CUDA (configure with -DTTT_CUDA=ON)")

ttt_status ttt_cuda_map(int op, float *y, int add, const float *a, const float *b, int bmode,
                        const float *c, size_t cols, size_t n, float p0, float p1, void *stream,
                        ttt_error *err) {
    (void)op, (void)y, (void)add, (void)a, (void)b, (void)bmode, (void)c, (void)cols, (void)n;
    (void)p0, (void)p1, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_reduce(int mode, float *y, int add, const float *x, const float *x2,
                           size_t rows, size_t cols, double scale, void *stream, ttt_error *err) {
    (void)mode, (void)y, (void)add, (void)x, (void)x2, (void)rows, (void)cols, (void)scale;
    (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_rownorm(int kind, float *y, const float *x, const float *gamma,
                            const float *beta, size_t rows, size_t n, float eps, void *stream,
                            ttt_error *err) {
    (void)kind, (void)y, (void)x, (void)gamma, (void)beta, (void)rows, (void)n, (void)eps;
    (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_rownorm_backward(int kind, float *gx, int add, float *dyxh, const float *dy,
                                     const float *x, const float *gamma, size_t rows, size_t n,
                                     float eps, void *stream, ttt_error *err) {
    (void)kind, (void)gx, (void)add, (void)dyxh, (void)dy, (void)x, (void)gamma, (void)rows;
    (void)n, (void)eps, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_sgemm(float *c, float alpha, const float *a, int ta, int lda, long long sa,
                          const float *b, int tb, int ldb, long long sb, float beta,
                          long long sc, int m, int n, int k, int batch, void *stream,
                          ttt_error *err) {
    (void)c, (void)alpha, (void)a, (void)ta, (void)lda, (void)sa, (void)b, (void)tb, (void)ldb;
    (void)sb, (void)beta, (void)sc, (void)m, (void)n, (void)k, (void)batch, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_gemm_bf16(float *c, float alpha, const uint16_t *a, int ta, int lda,
                              long long sa, const uint16_t *b, int tb, int ldb, long long sb,
                              float beta, long long sc, int m, int n, int k, int batch,
                              void *stream, ttt_error *err) {
    (void)c, (void)alpha, (void)a, (void)ta, (void)lda, (void)sa, (void)b, (void)tb, (void)ldb;
    (void)sb, (void)beta, (void)sc, (void)m, (void)n, (void)k, (void)batch, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_to_bf16(uint16_t *y, const float *x, size_t n, void *stream, ttt_error *err) {
    (void)y, (void)x, (void)n, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_from_bf16(float *y, int add, const uint16_t *x, size_t n, void *stream,
                              ttt_error *err) {
    (void)y, (void)add, (void)x, (void)n, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_strsm_lower(float *x, const float *L, int n, int m, int trans, int unit,
                                void *stream, ttt_error *err) {
    (void)x, (void)L, (void)n, (void)m, (void)trans, (void)unit, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_transpose(float *y, int add, const float *x, size_t batch, int m, int n,
                              void *stream, ttt_error *err) {
    (void)y, (void)add, (void)x, (void)batch, (void)m, (void)n, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_copy2d(float *dst, size_t ldd, int add, const float *src, size_t lds,
                           size_t rows, size_t cols, void *stream, ttt_error *err) {
    (void)dst, (void)ldd, (void)add, (void)src, (void)lds, (void)rows, (void)cols, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_cumsum(float *y, int add, const float *x, size_t T, size_t d, int reverse,
                           void *stream, ttt_error *err) {
    (void)y, (void)add, (void)x, (void)T, (void)d, (void)reverse, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_mask(int kind, float *y, int add, const float *x, size_t mats, int m, int n,
                         int k, void *stream, ttt_error *err) {
    (void)kind, (void)y, (void)add, (void)x, (void)mats, (void)m, (void)n, (void)k, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_decay_mask(float *D, const float *g, int T, int strict, void *stream,
                               ttt_error *err) {
    (void)D, (void)g, (void)T, (void)strict, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_gather_rows(float *y, const float *table, const int *ids, int n, int d,
                                int V, void *stream, ttt_error *err) {
    (void)y, (void)table, (void)ids, (void)n, (void)d, (void)V, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_scatter_add_rows(float *gtable, const float *dy, const int *ids, int n,
                                     int d, int V, void *stream, ttt_error *err) {
    (void)gtable, (void)dy, (void)ids, (void)n, (void)d, (void)V, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_cross_entropy(float *loss, float *lse, ttt_cuda_ce_stats *stats,
                                  double *row_loss, int *row_flag, const float *z,
                                  const int *targets, int N, int V, void *stream,
                                  ttt_error *err) {
    (void)loss, (void)lse, (void)stats, (void)row_loss, (void)row_flag, (void)z, (void)targets;
    (void)N, (void)V, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_cross_entropy_backward(float *g, int add, const float *z, const int *targets,
                                           const float *lse, const ttt_cuda_ce_stats *stats,
                                           const float *dl, int N, int V, void *stream,
                                           ttt_error *err) {
    (void)g, (void)add, (void)z, (void)targets, (void)lse, (void)stats, (void)dl, (void)N;
    (void)V, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_conv1d(float *y, const float *x, const float *w, const float *bias, int B,
                           int T, int C, int K, int silu, void *stream, ttt_error *err) {
    (void)y, (void)x, (void)w, (void)bias, (void)B, (void)T, (void)C, (void)K, (void)silu;
    (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_conv1d_backward(float *gx, int add_x, float *gw, int add_w, const float *dz,
                                    const float *x, const float *w, int B, int T, int C, int K,
                                    void *stream, ttt_error *err) {
    (void)gx, (void)add_x, (void)gw, (void)add_w, (void)dz, (void)x, (void)w, (void)B, (void)T;
    (void)C, (void)K, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_rope(float *y, int add, const float *x, int T, int d, int pos0, float base,
                         int inverse, void *stream, ttt_error *err) {
    (void)y, (void)add, (void)x, (void)T, (void)d, (void)pos0, (void)base, (void)inverse;
    (void)stream;
    return NO_CUDA(err);
}

ttt_status ttt_cuda_attention_causal(float *o, float *lse, const float *q, const float *k,
                                     const float *v, int B, int T, int dk, int dv, float scale,
                                     void *stream, ttt_error *err) {
    (void)o, (void)lse, (void)q, (void)k, (void)v, (void)B, (void)T, (void)dk, (void)dv;
    (void)scale, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_attention_causal_backward(float *gq, int add_q, float *gk, int add_k,
                                              float *gv, int add_v, double *delta,
                                              const float *dO, const float *q, const float *k,
                                              const float *v, const float *lse, int B, int T,
                                              int dk, int dv, float scale, void *stream,
                                              ttt_error *err) {
    (void)gq, (void)add_q, (void)gk, (void)add_k, (void)gv, (void)add_v, (void)delta, (void)dO;
    (void)q, (void)k, (void)v, (void)lse, (void)B, (void)T, (void)dk, (void)dv;
    (void)scale, (void)stream;
    return NO_CUDA(err);
}

ttt_status ttt_cuda_lru(float *h, const float *h0, const float *nu, const float *theta,
                        const float *u, int T, int n, void *stream, ttt_error *err) {
    (void)h, (void)h0, (void)nu, (void)theta, (void)u, (void)T, (void)n, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_lru_backward(float *gnu, int add_nu, float *gth, int add_th, float *gU,
                                 int add_u, float *gh0, int add_h0, const float *dH,
                                 const float *H, const float *U, const float *h0,
                                 const float *nu, const float *theta, int T, int n, void *stream,
                                 ttt_error *err) {
    (void)gnu, (void)add_nu, (void)gth, (void)add_th, (void)gU, (void)add_u, (void)gh0;
    (void)add_h0, (void)dH, (void)H, (void)U, (void)h0, (void)nu, (void)theta, (void)T, (void)n;
    (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_selective_scan(float *y, float *Hs, const float *h0, const float *x,
                                   const float *delta, const float *A_log, const float *B,
                                   const float *C, const float *D, int T, int d, int N,
                                   void *stream, ttt_error *err) {
    (void)y, (void)Hs, (void)h0, (void)x, (void)delta, (void)A_log, (void)B, (void)C, (void)D;
    (void)T, (void)d, (void)N, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_selective_scan_backward(float *gx, int add_x, float *gdel, int add_del,
                                            float *gAl, int add_al, float *gB, int add_b,
                                            float *gC, int add_c, float *gh0, int add_h0,
                                            float *Hs, float *Dl, const float *dy,
                                            const float *h0, const float *x, const float *delta,
                                            const float *A_log, const float *B, const float *C,
                                            const float *D, int T, int d, int N, void *stream,
                                            ttt_error *err) {
    (void)gx, (void)add_x, (void)gdel, (void)add_del, (void)gAl, (void)add_al, (void)gB;
    (void)add_b, (void)gC, (void)add_c, (void)gh0, (void)add_h0, (void)Hs, (void)Dl, (void)dy;
    (void)h0, (void)x, (void)delta, (void)A_log, (void)B, (void)C, (void)D, (void)T, (void)d;
    (void)N, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_dplr_gates(float *W, const float *log_w, int T, int d_k, int C, void *stream,
                               ttt_error *err) {
    (void)W, (void)log_w, (void)T, (void)d_k, (void)C, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_dplr(float *o, float *S, float *saved, const float *q, const float *k,
                         const float *v, const float *a, const float *b, const float *W, int T,
                         int d_k, int d_v, int C, void *stream, ttt_error *err) {
    (void)o, (void)S, (void)saved, (void)q, (void)k, (void)v, (void)a, (void)b, (void)W, (void)T;
    (void)d_k, (void)d_v, (void)C, (void)stream;
    return NO_CUDA(err);
}
ttt_status ttt_cuda_dplr_backward(float *gq, int add_q, float *gk, int add_k, float *gv,
                                  int add_v, float *ga, int add_a, float *gb, int add_b,
                                  float *glw, int add_lw, float *dS, float *St, float *U,
                                  const float *dO, const float *q, const float *k,
                                  const float *v, const float *a, const float *b,
                                  const float *log_w, const float *W, const float *S0s, int T,
                                  int d_k, int d_v, int C, void *stream, ttt_error *err) {
    (void)gq, (void)add_q, (void)gk, (void)add_k, (void)gv, (void)add_v, (void)ga, (void)add_a;
    (void)gb, (void)add_b, (void)glw, (void)add_lw, (void)dS, (void)St, (void)U, (void)dO;
    (void)q, (void)k, (void)v, (void)a, (void)b, (void)log_w, (void)W, (void)S0s, (void)T;
    (void)d_k, (void)d_v, (void)C, (void)stream;
    return NO_CUDA(err);
}

#endif
