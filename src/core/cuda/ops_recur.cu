/* The recurrences of the device ops (cuda_kernels.h, docs/device_ops.md "Recurrences"): the LRU's
 * complex diagonal recurrence (docs/math.md §8.1), Mamba's selective scan (§8.2) and the DPLR
 * delta rule of RWKV-7 (docs/math.md "RWKV-7"), forward and backward. Simple kernels, exactness
 * first: each recurrence runs sequentially over time in one thread per independent lane (an LRU
 * channel, a (channel, state) pair of the scan, a value column of the DPLR state), with the CPU
 * op's expressions in the CPU op's order (layers/diagonal/diagonal.c, layers/forms/delta_rule/
 * dplr.c), so that the two sides differ by the roundings of exp and of fused multiply-adds only.
 * Sums across lanes (the scan's gradients of B and C, the DPLR backward's per-row sums) are
 * separate passes or block phases; no atomics, so every run gives the same bits. */
#include "ops_common.cuh"

#include <math.h>

namespace {

using namespace ttt_ops;

#define GRID_LOOP(i, n)                                                                    \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                \
         i += (size_t)gridDim.x * blockDim.x)

/* ---- LRU ---- */

/* λ = r e^{iφ}, r = exp(−e^ν), φ = e^θ, γ = sqrt(1 − r²), in double as lru_params does. */
__device__ inline void lru_params(double *lr, double *li, double *g, double *r, double *phi,
                                  float nu, float theta) {
    *r = exp(-exp((double)nu));
    *phi = exp((double)theta);
    *lr = *r * cos(*phi);
    *li = *r * sin(*phi);
    *g = sqrt(fmax(1.0 - *r * *r, 0.0));
}

__global__ void lru_forward_kernel(float *h, const float *h0, const float *nu, const float *theta,
                                   const float *u, int T, int n) {
    GRID_LOOP(ii, (size_t)n) {
        const int i = (int)ii;
        double lr, li, g, r, phi;
        lru_params(&lr, &li, &g, &r, &phi, nu[i], theta[i]);
        const float ar = (float)lr, ai = (float)li, gf = (float)g;
        float xr = h0 ? h0[i] : 0.0f, xi = h0 ? h0[n + i] : 0.0f;
        for (int t = 0; t < T; t++) {
            const float *ut = u + (size_t)t * 2 * n;
            const float nr = ar * xr - ai * xi + gf * ut[i];
            const float ni = ar * xi + ai * xr + gf * ut[n + i];
            xr = nr, xi = ni;
            h[(size_t)t * 2 * n + i] = xr;
            h[(size_t)t * 2 * n + n + i] = xi;
        }
    }
}

/* The adjoint recurrence of lru_backward (diagonal.c) per channel, in double. */
__global__ void lru_backward_kernel(float *gnu, int add_nu, float *gth, int add_th, float *gU,
                                    int add_u, float *gh0, int add_h0, const float *dH,
                                    const float *H, const float *U, const float *h0,
                                    const float *nu, const float *theta, int T, int n) {
    GRID_LOOP(ii, (size_t)n) {
        const int i = (int)ii;
        double lr, li, g, r, phi;
        lru_params(&lr, &li, &g, &r, &phi, nu[i], theta[i]);
        double dr_ = 0, di_ = 0, da = 0, db = 0, dg = 0;
        for (int t = T - 1; t >= 0; t--) {
            const size_t row = (size_t)t * 2 * n;
            const double cr = lr * dr_ + li * di_, ci = lr * di_ - li * dr_;
            const double xr = dH[row + i] + cr, xi = dH[row + n + i] + ci;
            dr_ = xr, di_ = xi;
            const double ur = U[row + i], ui = U[row + n + i];
            if (gU) {
                put(gU, row + i, (float)(g * xr), add_u);
                put(gU, row + n + i, (float)(g * xi), add_u);
            }
            dg += xr * ur + xi * ui;
            const double pr = t > 0 ? H[row - 2 * n + i] : h0 ? h0[i] : 0.0;
            const double pi = t > 0 ? H[row - 2 * n + n + i] : h0 ? h0[n + i] : 0.0;
            da += xr * pr + xi * pi;
            db += -xr * pi + xi * pr;
        }
        if (gh0) {
            put(gh0, i, (float)(lr * dr_ + li * di_), add_h0);
            put(gh0, n + i, (float)(lr * di_ - li * dr_), add_h0);
        }
        const double dr = da * cos(phi) + db * sin(phi) - (g > 0 ? dg * r / g : 0.0);
        const double dphi = -da * r * sin(phi) + db * r * cos(phi);
        if (gnu) put(gnu, i, (float)(dr * r * -exp((double)nu[i])), add_nu);
        if (gth) put(gth, i, (float)(dphi * phi), add_th);
    }
}

/* ---- Mamba(1) selective scan ---- */

/* Every state h_t[i, k] (t < T) into Hs (T, d, N), one thread per (i, k): the recurrence of
 * ss_run, exp(Δ A) with CUDA's expf where the host takes fastexp.h's (both within 2 ulp). */
__global__ void ss_states_kernel(float *Hs, const float *h0, const float *x, const float *delta,
                                 const float *A_log, const float *B, int T, int d, int N) {
    GRID_LOOP(idx, (size_t)d * N) {
        const int i = (int)(idx / N), k = (int)(idx % N);
        const float A = -expf(A_log[idx]);
        float h = h0 ? h0[idx] : 0.0f;
        for (int t = 0; t < T; t++) {
            const float dt = delta[(size_t)t * d + i], dx = dt * x[(size_t)t * d + i];
            const float e = expf(dt * A);
            h = e * h + dx * B[(size_t)t * N + k];
            Hs[((size_t)t * d + i) * N + k] = h;
        }
    }
}

/* y_t[i] = Σ_k C_t[k] h_t[i, k] (+ D_i x_t[i]), the float sum in the host's order. */
__global__ void ss_readout_kernel(float *y, const float *Hs, const float *C, const float *D,
                                  const float *x, int T, int d, int N) {
    GRID_LOOP(ti, (size_t)T * d) {
        const size_t t = ti / d, i = ti % d;
        const float *h = Hs + ti * N, *Ct = C + t * N;
        float acc = 0.0f;
        for (int k = 0; k < N; k++) acc += Ct[k] * h[k];
        y[ti] = D ? acc + D[i] * x[ti] : acc;
    }
}

/* The adjoint per (i, k), from the last token: δ_t = dy_t[i] C_t[k] + exp(Δ_{t+1} A) δ_{t+1},
 * stored into Dl (T, d, N); ∂A_log = A Σ_t δ_t Δ_t e_t h_{t−1} (in double), ∂h0 = e_0 δ_0. */
__global__ void ss_adjoint_kernel(float *Dl, float *gAl, int add_al, float *gh0, int add_h0,
                                  const float *Hs, const float *h0, const float *dy,
                                  const float *delta, const float *A_log, const float *C, int T,
                                  int d, int N) {
    GRID_LOOP(idx, (size_t)d * N) {
        const int i = (int)(idx / N), k = (int)(idx % N);
        const float A = -expf(A_log[idx]);
        float g = 0.0f;
        double dA = 0.0;
        for (int t = T - 1; t >= 0; t--) {
            const float dyi = dy[(size_t)t * d + i], dti = delta[(size_t)t * d + i];
            const float hp = t > 0 ? Hs[((size_t)(t - 1) * d + i) * N + k] : h0 ? h0[idx] : 0.0f;
            const float ex = expf(dti * A);
            const float dl = dyi * C[(size_t)t * N + k] + g;
            const float eh = ex * hp;
            dA += (double)(dl * dti * eh);
            g = ex * dl;
            Dl[((size_t)t * d + i) * N + k] = dl;
        }
        if (gAl) put(gAl, idx, (float)(dA * A), add_al);
        if (gh0) put(gh0, idx, g, add_h0);
    }
}

/* Per (t, i): ∂x = Δ Σ_k δ B_t[k] + D_i dy, ∂Δ = Σ_k δ (A e h_{t−1} + B_t[k] x), float sums
 * over the N states in the host's order. */
__global__ void ss_grad_ti_kernel(float *gx, int add_x, float *gdel, int add_del, const float *Dl,
                                  const float *Hs, const float *h0, const float *dy,
                                  const float *x, const float *delta, const float *A_log,
                                  const float *B, const float *D, int T, int d, int N) {
    GRID_LOOP(ti, (size_t)T * d) {
        const size_t t = ti / d, i = ti % d;
        const float dti = delta[ti], xi = x[ti];
        const float *Bv = B + t * N, *dl = Dl + ti * N;
        const float *hp = t > 0 ? Hs + (ti - d) * N : h0 ? h0 + i * N : NULL;
        float gxi = 0.0f, gdi = 0.0f;
        for (int k = 0; k < N; k++) {
            const float A = -expf(A_log[i * N + k]);
            const float eh = expf(dti * A) * (hp ? hp[k] : 0.0f);
            gxi += dl[k] * Bv[k];
            gdi += dl[k] * (A * eh + Bv[k] * xi);
        }
        if (gx) put(gx, ti, gxi * dti + (D ? dy[ti] * D[i] : 0.0f), add_x);
        if (gdel) put(gdel, ti, gdi, add_del);
    }
}

/* Per (t, k): ∂B_t[k] = Σ_i δ Δ_t[i] x_t[i], ∂C_t[k] = Σ_i dy_t[i] h_t[i, k], in double. */
__global__ void ss_grad_tk_kernel(float *gB, int add_b, float *gC, int add_c, const float *Dl,
                                  const float *Hs, const float *dy, const float *x,
                                  const float *delta, int T, int d, int N) {
    GRID_LOOP(tk, (size_t)T * N) {
        const size_t t = tk / N, k = tk % N;
        double sb = 0.0, sc = 0.0;
        for (int i = 0; i < d; i++) {
            const size_t ti = t * d + (size_t)i, at = ti * N + k;
            sb += (double)(Dl[at] * delta[ti] * x[ti]);
            sc += (double)dy[ti] * Hs[at];
        }
        if (gB) put(gB, tk, (float)sb, add_b);
        if (gC) put(gC, tk, (float)sc, add_c);
    }
}

/* ---- DPLR (RWKV-7's delta rule) ---- */

/* ttt_gate_dither (layers/forms/kernels.h) on the device: the same double arithmetic. */
__device__ inline float gate_dither(double *drift, double alpha) {
    if (alpha < 1e-30) {
        *drift = 1.0;
        return (float)alpha;
    }
    const float a = (float)(alpha / *drift);
    *drift *= (double)a / alpha;
    return a;
}

/* The retentions w (T, d_k) as the host's forward rounds them: per key row, dithered, the drift
 * restarting at every chunk of C tokens (each chunk is one call of ttt_dplr_recurrent_ld);
 * log_w NULL: all 1. */
__global__ void dplr_gates_kernel(float *W, const float *log_w, int T, int dk, int C) {
    GRID_LOOP(ii, (size_t)dk) {
        double drift = 1.0;
        for (int t = 0; t < T; t++) {
            if (t % C == 0) drift = 1.0;
            const size_t at = (size_t)t * dk + ii;
            W[at] = log_w ? gate_dither(&drift, exp((double)log_w[at])) : 1.0f;
        }
    }
}

/* The forward, one thread per value column j: u = a_t S_{t−1}, then row by row
 * S_i ← w_i S_i + b_i u + k_i v_j, o_t[j] = Σ_i q_i S_i and the next token's u from the new rows,
 * as ttt_dplr_recurrent_ld sweeps them. S (d_k, d_v) holds S0 in and the final state out; saved
 * (nch, d_k, d_v), when not NULL, receives the state at each chunk's start. */
__global__ void dplr_forward_kernel(float *o, float *S, float *saved, const float *q,
                                    const float *k, const float *v, const float *a,
                                    const float *b, const float *W, int T, int dk, int dv,
                                    int C) {
    for (int j = threadIdx.x; j < dv; j += blockDim.x) {
        for (int t0 = 0, c = 0; t0 < T; t0 += C, c++) {
            const int t1 = t0 + C < T ? t0 + C : T;
            if (saved)
                for (int i = 0; i < dk; i++)
                    saved[((size_t)c * dk + i) * dv + j] = S[(size_t)i * dv + j];
            float u = 0.0f;
            for (int i = 0; i < dk; i++) u += a[(size_t)t0 * dk + i] * S[(size_t)i * dv + j];
            for (int t = t0; t < t1; t++) {
                const float *qt = q + (size_t)t * dk, *kt = k + (size_t)t * dk;
                const float *bt = b + (size_t)t * dk, *wt = W + (size_t)t * dk;
                const int next = t + 1 < t1;
                const float *an = next ? a + (size_t)(t + 1) * dk : NULL;
                const float vj = v[(size_t)t * dv + j];
                float ot = 0.0f, un = 0.0f;
                for (int i = 0; i < dk; i++) {
                    float *Sij = S + (size_t)i * dv + j;
                    const float x = wt[i] * *Sij + bt[i] * u + kt[i] * vj;
                    *Sij = x;
                    ot += qt[i] * x;
                    un += (next ? an[i] : 0.0f) * x;
                }
                o[(size_t)t * dv + j] = ot;
                u = un;
            }
        }
    }
}

/* The backward of ttt_dplr_recurrent_backward (dplr.c) in one block: chunk by chunk from the
 * last, the chunk's states St (C + 1, d_k, d_v) and u_t (U (C, d_v)) recomputed from its saved
 * start state by value columns, then token by token from the last, in phases separated by
 * barriers: rows (dq, dS += qᵀ dO, dk, db, d log w), columns (du = b dS, dv = k dS), rows
 * (da = du S_{t−1}ᵀ, dS ← Diag(w) dS + aᵀ du). dS (d_k, d_v) holds ∂L/∂S_T in and ∂L/∂S_0 out.
 * Each gradient element has one writer. du: d_v floats of shared memory. */
__global__ void dplr_backward_kernel(float *gq, int add_q, float *gk, int add_k, float *gv,
                                     int add_v, float *ga, int add_a, float *gb, int add_b,
                                     float *glw, int add_lw, float *dS, float *St, float *U,
                                     const float *dO, const float *q, const float *k,
                                     const float *v, const float *a, const float *b,
                                     const float *log_w, const float *W, const float *S0s, int T,
                                     int dk, int dv, int C) {
    extern __shared__ float du[];
    const size_t dkv = (size_t)dk * dv;
    const int nch = (T + C - 1) / C, tid = threadIdx.x, nt = blockDim.x;
    for (int c = nch - 1; c >= 0; c--) {
        const int t0 = c * C, n = t0 + C <= T ? C : T - t0;
        for (int j = tid; j < dv; j += nt) { /* the chunk's states, by columns */
            for (int i = 0; i < dk; i++)
                St[(size_t)i * dv + j] = S0s[(size_t)c * dkv + (size_t)i * dv + j];
            for (int tt = 0; tt < n; tt++) {
                const size_t t = (size_t)(t0 + tt);
                const float *Sp = St + (size_t)tt * dkv;
                float *Sn = St + (size_t)(tt + 1) * dkv;
                float u = 0.0f;
                for (int i = 0; i < dk; i++) u += a[t * dk + i] * Sp[(size_t)i * dv + j];
                U[(size_t)tt * dv + j] = u;
                const float vj = v[t * dv + j];
                for (int i = 0; i < dk; i++) {
                    const size_t ij = (size_t)i * dv + j;
                    Sn[ij] = W[t * dk + i] * Sp[ij] + b[t * dk + i] * u + k[t * dk + i] * vj;
                }
            }
        }
        __syncthreads();
        for (int tt = n - 1; tt >= 0; tt--) {
            const size_t t = (size_t)(t0 + tt), tk = t * dk, tv = t * dv;
            const float *Sp = St + (size_t)tt * dkv, *Sn = St + (size_t)(tt + 1) * dkv;
            const float *ut = U + (size_t)tt * dv, *dOt = dO + tv;
            for (int i = tid; i < dk; i += nt) { /* rows: read-out, write, low rank, decay */
                float *dSi = dS + (size_t)i * dv;
                const float *Si = Sn + (size_t)i * dv, *Pi = Sp + (size_t)i * dv;
                const float qi = q[tk + i];
                float acc = 0.0f;
                for (int j = 0; j < dv; j++) {
                    acc += dOt[j] * Si[j];
                    dSi[j] += qi * dOt[j];
                }
                if (gq) put(gq, tk + i, acc, add_q);
                float sk = 0.0f, sb = 0.0f, sw = 0.0f;
                for (int j = 0; j < dv; j++) {
                    sk += dSi[j] * v[tv + j];
                    sb += dSi[j] * ut[j];
                    sw += dSi[j] * Pi[j];
                }
                const float wi = log_w ? (float)exp((double)log_w[tk + i]) : 1.0f;
                if (gk) put(gk, tk + i, sk, add_k);
                if (gb) put(gb, tk + i, sb, add_b);
                if (glw) put(glw, tk + i, wi * sw, add_lw);
            }
            __syncthreads();
            for (int j = tid; j < dv; j += nt) { /* columns: du = b dS, dv = k dS */
                float sd = 0.0f, sv = 0.0f;
                for (int i = 0; i < dk; i++) {
                    const float x = dS[(size_t)i * dv + j];
                    sd += b[tk + i] * x;
                    sv += k[tk + i] * x;
                }
                du[j] = sd;
                if (gv) put(gv, tv + j, sv, add_v);
            }
            __syncthreads();
            for (int i = tid; i < dk; i += nt) { /* rows: da, dS_{t−1} */
                float *dSi = dS + (size_t)i * dv;
                const float *Pi = Sp + (size_t)i * dv;
                const float wi = log_w ? (float)exp((double)log_w[tk + i]) : 1.0f, ai = a[tk + i];
                float acc = 0.0f;
                for (int j = 0; j < dv; j++) {
                    acc += du[j] * Pi[j];
                    dSi[j] = wi * dSi[j] + ai * du[j];
                }
                if (ga) put(ga, tk + i, acc, add_a);
            }
            __syncthreads();
        }
    }
}

} // namespace

extern "C" ttt_status ttt_cuda_lru(float *h, const float *h0, const float *nu,
                                   const float *theta, const float *u, int T, int n, void *stream,
                                   ttt_error *err) {
    if (T <= 0 || n <= 0) return TTT_OK;
    lru_forward_kernel<<<blocks_for((size_t)n), kThreads, 0, (cudaStream_t)stream>>>(
        h, h0, nu, theta, u, T, n);
    return launched("lru_forward_kernel", (size_t)T * n, err);
}

extern "C" ttt_status ttt_cuda_lru_backward(float *gnu, int add_nu, float *gth, int add_th,
                                            float *gU, int add_u, float *gh0, int add_h0,
                                            const float *dH, const float *H, const float *U,
                                            const float *h0, const float *nu, const float *theta,
                                            int T, int n, void *stream, ttt_error *err) {
    if (n <= 0) return TTT_OK;
    lru_backward_kernel<<<blocks_for((size_t)n), kThreads, 0, (cudaStream_t)stream>>>(
        gnu, add_nu, gth, add_th, gU, add_u, gh0, add_h0, dH, H, U, h0, nu, theta, T, n);
    return launched("lru_backward_kernel", (size_t)T * n, err);
}

extern "C" ttt_status ttt_cuda_selective_scan(float *y, float *Hs, const float *h0,
                                              const float *x, const float *delta,
                                              const float *A_log, const float *B,
                                              const float *C, const float *D, int T, int d,
                                              int N, void *stream, ttt_error *err) {
    if (T <= 0 || d <= 0) return TTT_OK;
    const size_t dn = (size_t)d * N, td = (size_t)T * d;
    if (dn) {
        ss_states_kernel<<<blocks_for(dn), kThreads, 0, (cudaStream_t)stream>>>(
            Hs, h0, x, delta, A_log, B, T, d, N);
        const ttt_status s = launched("ss_states_kernel", dn * T, err);
        if (s != TTT_OK) return s;
    }
    ss_readout_kernel<<<blocks_for(td), kThreads, 0, (cudaStream_t)stream>>>(y, Hs, C, D, x, T, d,
                                                                            N);
    return launched("ss_readout_kernel", td, err);
}

extern "C" ttt_status ttt_cuda_selective_scan_backward(
    float *gx, int add_x, float *gdel, int add_del, float *gAl, int add_al, float *gB, int add_b,
    float *gC, int add_c, float *gh0, int add_h0, float *Hs, float *Dl, const float *dy,
    const float *h0, const float *x, const float *delta, const float *A_log, const float *B,
    const float *C, const float *D, int T, int d, int N, void *stream, ttt_error *err) {
    const size_t dn = (size_t)d * N, td = (size_t)T * d, tn = (size_t)T * N;
    cudaStream_t st = (cudaStream_t)stream;
    if (dn == 0 || T <= 0) return TTT_OK;
    ss_states_kernel<<<blocks_for(dn), kThreads, 0, st>>>(Hs, h0, x, delta, A_log, B, T, d, N);
    ttt_status s = launched("ss_states_kernel", dn * T, err);
    if (s != TTT_OK) return s;
    ss_adjoint_kernel<<<blocks_for(dn), kThreads, 0, st>>>(Dl, gAl, add_al, gh0, add_h0, Hs, h0,
                                                          dy, delta, A_log, C, T, d, N);
    s = launched("ss_adjoint_kernel", dn * T, err);
    if (s != TTT_OK) return s;
    if (gx || gdel) {
        ss_grad_ti_kernel<<<blocks_for(td), kThreads, 0, st>>>(gx, add_x, gdel, add_del, Dl, Hs,
                                                              h0, dy, x, delta, A_log, B, D, T,
                                                              d, N);
        s = launched("ss_grad_ti_kernel", td * N, err);
        if (s != TTT_OK) return s;
    }
    if (gB || gC) {
        ss_grad_tk_kernel<<<blocks_for(tn), kThreads, 0, st>>>(gB, add_b, gC, add_c, Dl, Hs, dy,
                                                              x, delta, T, d, N);
        s = launched("ss_grad_tk_kernel", tn * d, err);
    }
    return s;
}

extern "C" ttt_status ttt_cuda_dplr_gates(float *W, const float *log_w, int T, int dk, int C,
                                          void *stream, ttt_error *err) {
    if (T <= 0 || dk <= 0) return TTT_OK;
    dplr_gates_kernel<<<blocks_for((size_t)dk), kThreads, 0, (cudaStream_t)stream>>>(W, log_w, T,
                                                                                   dk, C);
    return launched("dplr_gates_kernel", (size_t)T * dk, err);
}

/* Threads of the DPLR kernels' one block: enough for a head's columns, a multiple of a warp. */
static int dplr_threads(int dk, int dv) {
    const int m = dk > dv ? dk : dv, t = (m + 31) / 32 * 32;
    return t < 32 ? 32 : t > 256 ? 256 : t;
}

extern "C" ttt_status ttt_cuda_dplr(float *o, float *S, float *saved, const float *q,
                                    const float *k, const float *v, const float *a,
                                    const float *b, const float *W, int T, int dk, int dv, int C,
                                    void *stream, ttt_error *err) {
    if (T <= 0 || dk <= 0 || dv <= 0) return TTT_OK;
    dplr_forward_kernel<<<1, dplr_threads(dk, dv), 0, (cudaStream_t)stream>>>(
        o, S, saved, q, k, v, a, b, W, T, dk, dv, C);
    return launched("dplr_forward_kernel", (size_t)T * dk * dv, err);
}

extern "C" ttt_status ttt_cuda_dplr_backward(
    float *gq, int add_q, float *gk, int add_k, float *gv, int add_v, float *ga, int add_a,
    float *gb, int add_b, float *glw, int add_lw, float *dS, float *St, float *U, const float *dO,
    const float *q, const float *k, const float *v, const float *a, const float *b,
    const float *log_w, const float *W, const float *S0s, int T, int dk, int dv, int C,
    void *stream, ttt_error *err) {
    if (T <= 0 || dk <= 0 || dv <= 0) return TTT_OK;
    const size_t shm = (size_t)dv * sizeof(float);
    if (dv > TTT_CUDA_DPLR_MAX_DV)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "dplr_backward_kernel: d_v = %d is wider than its shared memory "
                             "holds (%d columns)",
                             dv, TTT_CUDA_DPLR_MAX_DV);
    dplr_backward_kernel<<<1, dplr_threads(dk, dv), shm, (cudaStream_t)stream>>>(
        gq, add_q, gk, add_k, gv, add_v, ga, add_a, gb, add_b, glw, add_lw, dS, St, U, dO, q, k,
        v, a, b, log_w, W, S0s, T, dk, dv, C);
    return launched("dplr_backward_kernel", (size_t)T * dk * dv, err);
}
