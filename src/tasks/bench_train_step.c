/* The benchmark's train_step measure: forward, backward and AdamW update of the sequence model. */
#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "autograd.h"
#include "blas.h"
#include "fault.h"
#include "data.h"
#include "mixer.h"
#include "seqmodel.h"
#include "rng.h"
#include "safetensors.h"
#include "task.h"
#include "trained.h"
#include "layer.h"
#include "diagonal.h"
#include "scan.h"
#include "bench_internal.h"

/* ---- measure: train_step ---- */

/* CPU seconds used by the whole process so far (all threads). */
double ttt_bench_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ttt_bench_machine_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* The MQAR problem of one sequence length L (the generator's other settings at their defaults). */
static void train_mqar_config(const ttt_bench_cfg *bc, int L, ttt_mqar_config *c) {
    ttt_mqar_config_default(c);
    c->vocab = bc->vocab;
    c->n_pairs = bc->pairs;
    c->seq_len = L;
}

/* The model's io: token ids in, logits over V out; learned positions (if any) sized for the
 * longest L, so every L runs the same parameters. */
static ttt_seq_model_io train_io(const ttt_bench_cfg *bc) {
    int longest = 1;
    for (int i = 0; i < bc->seq_len.n; i++)
        if (bc->seq_len.v[i] > longest) longest = (int)bc->seq_len.v[i];
    return (ttt_seq_model_io){.vocab = bc->vocab, .seq_len = longest};
}

ttt_status ttt_bench_train_step_check(ttt_bench_cfg *bc, const ttt_cfg_node *root,
                                      ttt_cfg_node *sections, ttt_error *err) {
    const ttt_cfg_node *task = ttt_cfg_get(root, "task");
    for (int i = 0; i < bc->seq_len.n; i++) {
        ttt_mqar_config c;
        train_mqar_config(bc, (int)bc->seq_len.v[i], &c);
        ttt_status s = ttt_mqar_config_check(&c, err);
        if (s != TTT_OK) {
            char msg[TTT_ERROR_MSG_LEN];
            snprintf(msg, sizeof msg, "%s", err->msg);
            return ttt_cfg_error(err, s, ttt_cfg_get(task, "seq_len")->items[i],
                                 "task.seq_len = %d: %s", c.seq_len, msg);
        }
    }
    /* the model, layer and train sections as a trained task checks them (and the memory a
     * step needs) */
    const ttt_seq_model_io io = train_io(bc);
    return ttt_trained_parse(&bc->trained, root, sections, &io, err);
}

/* The data of the timed steps: TRAIN_BATCHES batches of B sequences drawn from the seed before
 * the clock starts, handed out in turn (the trainer reads them where they are, as the mqar task
 * hands out rows gathered from its fixed training set). The trainer asks for a batch at the start
 * of every step, so the clocks read at each request delimit the steps: the time from one request
 * to the next is one whole iteration of the training loop. */
#define TRAIN_BATCHES 4


/* Minor page faults of the whole process so far (every one is a page the kernel had to map and
 * zero: memory taken from the system anew). */
static double minor_faults(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_minflt : NAN;
}

/* The process's resident set now (VmRSS) or its high-water mark (VmHWM) in bytes, from
 * /proc/self/status; NAN where there is none. */
static double resident_bytes(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return NAN;
    char line[256];
    double v = NAN;
    const size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = 1024.0 * strtod(line + n + 1, NULL); /* "VmRSS:    1234 kB" */
            break;
        }
    fclose(f);
    return v;
}

/* Start the high-water mark of the resident set afresh at the current resident set (Linux ≥ 4.0:
 * writing 5 to clear_refs), so that a measurement's peak is its own and not the process's.
 * Nonzero when that worked. */
static int resident_peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    const int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

ttt_status ttt_bench_feed_next(void *user, ttt_seq_batch *out, ttt_error *err) {
    (void)err;
    ttt_bench_train_feed *f = user;
    if (f->next < f->n_stamps) {
        f->wall[f->next] = ttt_now();
        f->cpu[f->next] = ttt_bench_cpu_now();
        f->faults[f->next] = minor_faults();
    }
    const size_t off = (size_t)(f->next++ % f->n_batches) * (size_t)f->B * (size_t)f->set.L;
    *out = (ttt_seq_batch){.B = f->B, .T = f->set.L, .tokens = f->set.tokens + off,
                           .labels = f->set.labels + off};
    return TTT_OK;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What one measurement found (seconds per step). */
typedef struct train_timing {
    double best, median; /* wall clock: fastest and median timed step */
    double cpu_best;     /* process CPU seconds (all threads) of the step with the least */
    double peak_bytes;   /* the sum of the parts below */
    double param_bytes;  /* parameters and their gradients */
    double optim_bytes;  /* AdamW's two moments */
    double shard_bytes;  /* the gradient buffers of the shards after the first */
    double data_bytes;   /* the batches the steps read (tokens and labels) */
    ttt_train_memory mem; /* the arena's parts (train.h) */
    double rss_bytes;    /* the resident set's growth from before the run to its peak */
    double faults_first; /* minor page faults of the warm-up step */
    double faults_step;  /* minor page faults per step from the third (mean) */
    double gpu_peak_bytes, gpu_reserved_bytes; /* on a device: train.h device_peak, ..._peak */
} train_timing;

/* A freshly initialized model trained by ttt_train for repeats + 2 steps on `threads` threads
 * and as many shards. Step 1 warms the arenas, caches and pages up; steps 2 … repeats + 1 are
 * timed from the batch request that starts each to the one that starts the next (the last step
 * only closes the window of the one before). Also the step's memory (see the header comment). */
static ttt_status time_train_steps(const ttt_seq_model_config *mc, const ttt_train_config *base,
                                   ttt_bench_train_feed *feed, int threads, int repeats,
                                   uint64_t seed, train_timing *out, ttt_error *err) {
    ttt_seq_model m;
    TTT_TRY(ttt_seq_model_init(&m, mc, seed, err));
    ttt_train_config tc = *base;
    tc.steps = repeats + 2;
    tc.threads = threads;
    tc.shards = threads < tc.batch ? threads : tc.batch;
    tc.log_every = tc.steps; /* one training record, at the end (nobody reads it) */
    tc.eval_every = 0;
    tc.checkpoint_every = 0;
    tc.stop_at = 0;
    tc.adamw.total_steps = 0; /* no cosine decay: the schedule's shape does not change the work */
    feed->next = 0;
    feed->n_stamps = tc.steps;
    feed->wall = ttt_fault_malloc(sizeof(double) * (size_t)tc.steps);
    feed->cpu = ttt_fault_malloc(sizeof(double) * (size_t)tc.steps);
    feed->faults = ttt_fault_malloc(sizeof(double) * (size_t)tc.steps);
    double *secs = ttt_fault_malloc(sizeof(double) * (size_t)repeats);
    ttt_status s = TTT_OK;
    if (!feed->wall || !feed->cpu || !feed->faults || !secs)
        s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
    ttt_train_data data = {.user = feed, .next = ttt_bench_feed_next};
    ttt_train_result res;
    /* the resident set's growth over the run, from here (the model and the batches exist) to
     * its peak: what the training itself took from the system, as the PyTorch twin measures
     * its own (tests/bench/compare_torch_train.py) */
    const double rss0 = resident_bytes("VmRSS");
    const int peak_ok = resident_peak_reset();
    if (s == TTT_OK) {
        const ttt_train_run tr = {.config_hash = "", .series = "", .mixer = ""};
        s = ttt_train(&m, &tc, &data, &tr, &res, err);
    }
    const double faults_end = minor_faults();
    out->rss_bytes = peak_ok ? resident_bytes("VmHWM") - rss0 : NAN;
    if (s == TTT_OK && feed->next != tc.steps)
        s = ttt_error_set(err, TTT_ERR_UNSUPPORTED, "benchmark: the trainer asked for %ld "
                                                    "batches in %ld steps; cannot time its steps",
                          feed->next, tc.steps);
    if (s == TTT_OK) {
        out->cpu_best = INFINITY;
        for (int i = 0; i < repeats; i++) { /* step i + 2: requests i + 1 → i + 2 (0-based) */
            secs[i] = feed->wall[i + 2] - feed->wall[i + 1];
            const double c = feed->cpu[i + 2] - feed->cpu[i + 1];
            if (c < out->cpu_best) out->cpu_best = c;
        }
        qsort(secs, (size_t)repeats, sizeof *secs, cmp_double);
        out->best = secs[0];
        out->median = repeats % 2 ? secs[repeats / 2]
                                  : 0.5 * (secs[repeats / 2 - 1] + secs[repeats / 2]);
        const double numel = (double)ttt_params_numel(&m.params);
        out->param_bytes = 8.0 * numel;
        out->optim_bytes = 8.0 * numel;
        out->shard_bytes = 4.0 * numel * (tc.shards - 1);
        out->data_bytes = 2.0 * sizeof(int) * (double)feed->set.n * feed->set.L;
        out->mem = res.mem;
        out->gpu_peak_bytes = (double)res.device_peak;
        out->gpu_reserved_bytes = (double)res.device_reserved_peak;
        out->peak_bytes = out->param_bytes + out->optim_bytes + out->shard_bytes +
                          out->data_bytes + (double)res.arena_peak;
        out->faults_first = feed->faults[1] - feed->faults[0];
        /* from the third step on, as the PyTorch twin counts its own (its optimizer state
         * appears in its first step) */
        out->faults_step = (faults_end - feed->faults[2]) / (double)(tc.steps - 2);
    }
    free(secs);
    free(feed->wall);
    free(feed->cpu);
    free(feed->faults);
    feed->wall = feed->cpu = feed->faults = NULL;
    feed->n_stamps = 0;
    ttt_seq_model_free(&m);
    return s;
}

ttt_status ttt_bench_train_step(ttt_task_run *run, ttt_error *err) {
    const ttt_bench_cfg *bc = run->cfg;
    const int repeats = bc->repeats;
    const ttt_seq_model_config mc = bc->trained.model;
    const ttt_train_config tc = bc->trained.train;
    char mixer[128];
    ttt_seq_model_describe(&mc, mixer, sizeof mixer);
    const int uses_layer = ttt_bench_uses_layer(&mc);
    const char *preset = uses_layer && mc.layer.preset ? mc.layer.preset : mixer;
    const char *form = uses_layer ? ttt_bench_train_form_used(&mc) : "softmax";
    /* on a device the layer runs the form the device step chooses (the mixer's answer) */
    const ttt_mixer *mx = ttt_mixer_at(mc.mixer);
    const char *dev_form = uses_layer && !ttt_device_is_host(tc.device) && mx->device_form
                               ? mx->device_form(&mc)
                               : NULL;
    if (dev_form) form = dev_form;
    const ttt_form_entry *fe = uses_layer ? ttt_bench_train_form_entry(&mc) : NULL;
    const int chunked = fe && fe->chunked;
    ttt_status s = TTT_OK;
    for (int li = 0; li < bc->seq_len.n && s == TTT_OK; li++) {
        const int L = (int)bc->seq_len.v[li];
        ttt_mqar_config c;
        train_mqar_config(bc, L, &c);
        ttt_bench_train_feed feed = {.B = tc.batch, .n_batches = TRAIN_BATCHES};
        ttt_rng root;
        ttt_rng_seed(&root, run->seed);
        ttt_rng r = ttt_rng_fork(&root, ttt_hash_str("benchmark/mqar"));
        TTT_TRY(ttt_mqar_make_set(&feed.set, &c, TRAIN_BATCHES * tc.batch, &r, err));
        if (bc->dump && run->run_dir) {
            ttt_seq_batch b0;
            feed.next = 0;
            ttt_bench_feed_next(&feed, &b0, err);
            s = ttt_bench_dump_train_step(run, &mc, &b0, err);
        }
        if (s == TTT_OK && bc->dump_steps > 0 && run->run_dir)
            s = ttt_bench_dump_train_steps(run, &mc, &tc, &c, err);
        double t1 = NAN; /* the 1-thread step, when measured */
        int done[TTT_BENCH_MAX_THREADS + 1] = {0};
        for (int ni = 0; ni < bc->threads.n && s == TTT_OK; ni++) {
            int nt = (int)bc->threads.v[ni];
            if (nt == 0) nt = ttt_bench_machine_threads();
            if (nt > TTT_BENCH_MAX_THREADS) nt = TTT_BENCH_MAX_THREADS;
            const int used = nt < tc.batch ? nt : tc.batch; /* a shard holds ≥ 1 sequence */
            ttt_progress_update(run->progress, ++run->work_done, run->label);
            if ((s = ttt_train_check_stop(err)) != TTT_OK) break; /* docs/hardening.md "Signals" */
            if (done[used]++) continue;
            train_timing tm;
            memset(&tm, 0, sizeof tm);
            s = time_train_steps(&mc, &tc, &feed, used, repeats, run->seed, &tm, err);
            if (s != TTT_OK) break;
            const double best = tm.best, median = tm.median;
            if (used == 1 && isnan(t1)) t1 = best;
            const double tokens = (double)tc.batch * L;
            ttt_record rec;
            ttt_record_clear(&rec);
            char series[192];
            if (chunked)
                snprintf(series, sizeof series, "%s %s C=%d L=%d", preset, form, mc.layer.chunk,
                         L);
            else
                snprintf(series, sizeof series, "%s %s L=%d", preset, form, L);
            ttt_record_str(&rec, "series", series);
            ttt_record_str(&rec, "measure", "train_step");
            ttt_record_str(&rec, "preset", preset);
            ttt_record_str(&rec, "form", form);
            ttt_record_str(&rec, "mixer", mixer);
            if (chunked) ttt_record_num(&rec, "chunk", mc.layer.chunk);
            ttt_record_num(&rec, "d_model", mc.d_model);
            ttt_record_num(&rec, "layers", mc.n_layers);
            ttt_record_num(&rec, "heads", mc.n_heads);
            ttt_record_num(&rec, "d_head", mc.head_dim);
            ttt_record_num(&rec, "batch", tc.batch);
            ttt_record_num(&rec, "seq_len", L);
            ttt_record_num(&rec, "vocab", c.vocab);
            ttt_record_num(&rec, "threads", used);
            ttt_record_num(&rec, "shards", used);
            ttt_record_num(&rec, "steps", repeats);
            ttt_record_num(&rec, "seconds", best);
            ttt_record_num(&rec, "seconds_median", median);
            ttt_record_num(&rec, "tokens_per_s", tokens / best);
            ttt_record_num(&rec, "tokens_per_s_median", tokens / median);
            ttt_record_num(&rec, "cpu_seconds", tm.cpu_best);
            if (!isnan(t1)) ttt_record_num(&rec, "speedup_1t", t1 / best);
            const double MB = 1024.0 * 1024.0;
            ttt_record_num(&rec, "peak_mb", tm.peak_bytes / MB);
            ttt_record_num(&rec, "act_mb", (double)tm.mem.activations / MB);
            ttt_record_num(&rec, "act_grad_mb", (double)tm.mem.act_grads / MB);
            ttt_record_num(&rec, "work_mb", (double)tm.mem.workspace / MB);
            ttt_record_num(&rec, "param_mb", tm.param_bytes / MB);
            ttt_record_num(&rec, "optim_mb", tm.optim_bytes / MB);
            ttt_record_num(&rec, "shard_mb", tm.shard_bytes / MB);
            ttt_record_num(&rec, "data_mb", tm.data_bytes / MB);
            ttt_record_num(&rec, "arena_held_mb", (double)tm.mem.arena_held / MB);
            ttt_record_num(&rec, "rss_mb", tm.rss_bytes / MB);
            ttt_record_num(&rec, "faults_first", tm.faults_first);
            ttt_record_num(&rec, "faults_per_step", tm.faults_step);
            if (!ttt_device_is_host(tc.device)) { /* the device pool's high-water marks */
                ttt_record_num(&rec, "gpu_peak_mb", tm.gpu_peak_bytes / MB);
                ttt_record_num(&rec, "gpu_reserved_mb", tm.gpu_reserved_bytes / MB);
            }
            ttt_results_add(run->results, &rec, 1);
        }
        ttt_token_set_free(&feed.set);
    }
    return s;
}
