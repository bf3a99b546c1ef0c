/* libttt on GPU memory: a gated delta rule layer (Gated DeltaNet) run on buffers allocated with
 * cudaMalloc, on a stream of the program's, then checked against the same layer run on the host
 * (docs/api.md "Device buffers").
 *
 * Uses only the public header and the CUDA runtime. Built only when ttt is built with CUDA. Exit
 * status: 0 when the device's output and final state match the host's; 1 when they do not, or
 * when a changed input does not change the result; 77 (skipped) when no GPU is present, after
 * saying why. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include <ttt/ttt.h>

enum { B = 2, T = 300, H = 4, D = 64 };

/* Both sides are within ~2e-6 relative RMS of the float64 recurrence on such inputs (the CPU
 * chunkwise form and the CUDA kernels, docs/forms.md "Precision on hard inputs"), so they differ
 * by less than 4e-6; the bound leaves 2.5x room. A wrong gate or rate moves the result by far
 * more (checked below with one changed gate). */
#define REL_RMS_BOUND 1e-5

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static float uniform(void) { /* in (-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static double rel_rms(const float *got, const float *want, size_t n) {
    double e = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        w += (double)want[i] * want[i];
    }
    return sqrt(e / (w > 0 ? w : 1));
}

static int cuda_ok(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 1;
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    return 0;
}

/* A host buffer copied to a new device buffer. */
static void *to_device(const void *src, size_t bytes) {
    void *p = NULL;
    if (!cuda_ok(cudaMalloc(&p, bytes), "cudaMalloc")) return NULL;
    if (!cuda_ok(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy")) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

int main(void) {
    ttt_error err;
    if (ttt_cuda_device_count(&err) == 0) {
        printf("skipped: %s\n", ttt_errmsg(&err));
        return 77;
    }
    printf("%s\n", ttt_cuda_describe());

    ttt_layer_descriptor desc;
    ttt_layer_descriptor_init(&desc, sizeof desc);
    desc.preset = "gated_deltanet";
    desc.scale = 1.0 / sqrt((double)D);
    ttt_layer_handle *layer = NULL;
    if (ttt_layer_new(&layer, &desc, D, D, &err) != TTT_OK) {
        fprintf(stderr, "ttt_layer_new: %s\n", ttt_errmsg(&err));
        return 1;
    }
    printf("%s\n", ttt_layer_tuple(layer));

    /* Inputs: unit-norm keys, rates η in (0, 1), gates log α in (-0.1, 0). */
    const size_t n_x = (size_t)B * T * H * D, n_tok = (size_t)B * T * H;
    const size_t n_s = (size_t)B * H * D * D;
    float *q = malloc(n_x * sizeof(float)), *k = malloc(n_x * sizeof(float));
    float *v = malloc(n_x * sizeof(float)), *eta = malloc(n_tok * sizeof(float));
    float *la = malloc(n_tok * sizeof(float));
    float *o_host = malloc(n_x * sizeof(float)), *o_dev = malloc(n_x * sizeof(float));
    float *s_host = malloc(n_s * sizeof(float)), *s_dev = malloc(n_s * sizeof(float));
    for (size_t i = 0; i < n_x; i++) q[i] = uniform(), v[i] = uniform();
    for (size_t r = 0; r < n_tok; r++) {
        double s = 0;
        for (int j = 0; j < D; j++) {
            k[r * D + j] = uniform();
            s += (double)k[r * D + j] * k[r * D + j];
        }
        for (int j = 0; j < D; j++) k[r * D + j] = (float)(k[r * D + j] / sqrt(s));
        eta[r] = 0.5f * (uniform() + 1.0f);
        la[r] = 0.05f * (uniform() - 1.0f);
    }

    /* The host call. */
    float *host_out[1] = {s_host};
    ttt_batch_io io = {.size = sizeof io,
                       .B = B, .T = T, .H = H, .o = o_host, .q = q, .k = k, .v = v, .eta = eta,
                       .log_alpha = la, .state_out = host_out};
    if (ttt_layer_forward_run(layer, &io, 0, &err) != TTT_OK) {
        fprintf(stderr, "host forward: %s\n", ttt_errmsg(&err));
        return 1;
    }
    printf("host: form %s\n", ttt_layer_form_for(layer, &io));

    /* The same call on device buffers, queued on a stream of ours. */
    float *dq = to_device(q, n_x * 4), *dk = to_device(k, n_x * 4), *dv = to_device(v, n_x * 4);
    float *deta = to_device(eta, n_tok * 4), *dla = to_device(la, n_tok * 4);
    float *d_o = NULL, *d_s = NULL;
    cudaStream_t stream = NULL;
    if (!dq || !dk || !dv || !deta || !dla || !cuda_ok(cudaMalloc((void **)&d_o, n_x * 4), "o") ||
        !cuda_ok(cudaMalloc((void **)&d_s, n_s * 4), "state") ||
        !cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate"))
        return 1;
    float *dev_out[1] = {d_s};
    ttt_batch_io dio = {.size = sizeof dio,
                        .B = B, .T = T, .H = H, .o = d_o, .q = dq, .k = dk, .v = dv, .eta = deta,
                        .log_alpha = dla, .state_out = dev_out, .device = TTT_DEVICE_CUDA,
                        .device_index = 0, .stream = stream, .dtype = TTT_DTYPE_F32};
    printf("cuda: form %s\n", ttt_layer_form_for(layer, &dio));
    if (ttt_layer_forward_run(layer, &dio, 0, &err) != TTT_OK) {
        fprintf(stderr, "device forward: %s\n", ttt_errmsg(&err));
        return 1;
    }
    /* the call returned before the GPU finished: wait on the stream, then copy back */
    if (!cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize") ||
        !cuda_ok(cudaMemcpy(o_dev, d_o, n_x * 4, cudaMemcpyDeviceToHost), "copy o") ||
        !cuda_ok(cudaMemcpy(s_dev, d_s, n_s * 4, cudaMemcpyDeviceToHost), "copy state"))
        return 1;
    const double e_o = rel_rms(o_dev, o_host, n_x), e_s = rel_rms(s_dev, s_host, n_s);
    printf("device vs host, relative RMS: output %.2e, final state %.2e (bound %.0e)\n", e_o, e_s,
           REL_RMS_BOUND);
    int bad = !(e_o <= REL_RMS_BOUND && e_s <= REL_RMS_BOUND);

    /* One gate changed (token 100 of the first sequence forgets most of its state): the device
     * result must move well past the bound, or the comparison above proves nothing. */
    const float strong = -3.0f;
    if (!cuda_ok(cudaMemcpy(dla + (size_t)100 * H, &strong, 4, cudaMemcpyHostToDevice), "gate") ||
        ttt_layer_forward_run(layer, &dio, 0, &err) != TTT_OK ||
        !cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize") ||
        !cuda_ok(cudaMemcpy(o_dev, d_o, n_x * 4, cudaMemcpyDeviceToHost), "copy o")) {
        fprintf(stderr, "perturbed call: %s\n", ttt_errmsg(&err));
        return 1;
    }
    const double e_p = rel_rms(o_dev, o_host, n_x);
    printf("with one gate changed: output %.2e from the host's (must exceed %.0e)\n", e_p,
           100 * REL_RMS_BOUND);
    bad |= !(e_p > 100 * REL_RMS_BOUND);

    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(deta), cudaFree(dla), cudaFree(d_o);
    cudaFree(d_s);
    cudaStreamDestroy(stream);
    free(q), free(k), free(v), free(eta), free(la), free(o_host), free(o_dev), free(s_host);
    free(s_dev);
    ttt_layer_free(layer);
    printf("%s\n", bad ? "MISMATCH" : "ok");
    return bad;
}
