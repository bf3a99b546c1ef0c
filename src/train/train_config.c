/* The train: section of a configuration (train.h): its options, train.device and train.dtype,
 * and what a step on a device refuses. bfloat16 is the device step's mixed precision (docs/gpu.md
 * "bfloat16 training"); the host refuses it. */
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer.h"

const ttt_option ttt_train_options[] = {
    {"steps", TTT_OPT_INT, "1000", 1, 1e12, NULL, "optimizer updates"},
    {"batch", TTT_OPT_INT, "32", 1, 1 << 20, NULL, "sequences per update"},
    {"shards", TTT_OPT_INT, "2", 1, 256, NULL,
     "parts of a batch computed independently and in parallel; results depend on this, not "
     "on the number of threads or of MPI ranks (at least the number of ranks)"},
    {"threads", TTT_OPT_INT, "0", 0, 1024, NULL,
     "threads for the shards; 0 = min(shards, cores)"},
    {"data_parallel", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|true|false",
     "under MPI: true = every rank trains each point, the shards of a batch split over the "
     "ranks; false = each point whole on one rank; auto = true when the sweep has fewer points "
     "than ranks (the first point's value decides; results are the same either way)"},
    {"lr", TTT_OPT_FLOAT, "1e-3", 1e-12, 10.0, NULL, "peak learning rate of AdamW"},
    {"beta1", TTT_OPT_FLOAT, "0.9", 0.0, 0.999999, NULL, "AdamW beta1"},
    {"beta2", TTT_OPT_FLOAT, "0.999", 0.0, 0.999999999, NULL, "AdamW beta2"},
    {"eps", TTT_OPT_FLOAT, "1e-8", 1e-30, 1.0, NULL, "AdamW epsilon"},
    {"weight_decay", TTT_OPT_FLOAT, "0.1", 0.0, 100.0, NULL,
     "decoupled weight decay of matrices (norm gains, biases and gates are not decayed)"},
    {"warmup", TTT_OPT_INT, "100", 0, 1e12, NULL, "linear warm-up steps"},
    {"min_lr_ratio", TTT_OPT_FLOAT, "0.1", 0.0, 1.0, NULL,
     "the cosine schedule ends at this fraction of lr"},
    {"clip", TTT_OPT_FLOAT, "1.0", 0.0, 1e12, NULL,
     "clip the gradient to this global norm; 0 = off"},
    {"eval_every", TTT_OPT_INT, "0", 0, 1e12, NULL,
     "evaluate every this many steps; 0 = only at the end"},
    {"log_every", TTT_OPT_INT, "10", 1, 1e12, NULL, "a training record every this many steps"},
    {"checkpoint_every", TTT_OPT_INT, "0", 0, 1e12, NULL,
     "write a checkpoint every this many steps; 0 = only at the end"},
    {"init_from", TTT_OPT_STRING, "", TTT_NO_RANGE, NULL,
     "initial parameters from a file `ttt export` wrote or PyTorch saved in its names and "
     "layouts (docs/training.md \"Exporting to PyTorch\"); empty: the model's own "
     "initialization. A checkpoint of the run itself, when there is one, wins (resume)"},
    {"stop_at", TTT_OPT_INT, "0", 0, 1e12, NULL,
     "stop after this step as if interrupted (a checkpoint is written; run again to resume); "
     "0 = never"},
    /* The four below are validated here and shown by `ttt list`, but their defaults are not
     * written into the resolved section (ttt_train_config_parse_section, train.h). */
    {"device", TTT_OPT_STRING, "cpu", TTT_NO_RANGE, NULL,
     "where the step runs: cpu, cuda (= cuda:0) or cuda:N; cuda is refused where there is no "
     "GPU, and for mixers and layers without a device path (docs/training.md \"Device and "
     "precision\")"},
    {"devices", TTT_OPT_STRING, "", TTT_NO_RANGE, NULL,
     "data-parallel training over GPUs, one rank per entry: N (cuda:0 to cuda:N-1), cuda:A-B, "
     "or a comma-separated list of those and cuda:N (a GPU may repeat: ranks that share it); "
     "each rank takes its part of every batch and the gradients are summed over the ranks "
     "(docs/scaling.md \"Several GPUs\"); empty: train.device alone"},
    {"dtype", TTT_OPT_CHOICE, "float32", TTT_NO_RANGE, "float32|bfloat16",
     "precision of the step: float32, or bfloat16 (cuda only: bf16 products, fp32 master "
     "weights and inner state)"},
    {"recompute", TTT_OPT_INT, "0", 0, 1 << 20, NULL,
     "blocks (the first N; every block when N is at least their number) whose activations are "
     "not kept for the backward but computed again there from the block's input: less memory "
     "for one more forward of those blocks, the same gradients bit for bit (docs/training.md "
     "\"Memory of a training step\"); 0 = none"},
    TTT_OPTION_END,
};

int ttt_train_parse_device(const char *text, ttt_device *d) {
    if (strcmp(text, "cpu") == 0) {
        *d = ttt_device_host();
        return 1;
    }
    if (strncmp(text, "cuda", 4) != 0) return 0;
    if (text[4] == '\0') {
        *d = ttt_device_cuda(0);
        return 1;
    }
    if (text[4] != ':' || text[5] < '0' || text[5] > '9') return 0;
    long n = 0;
    for (const char *p = text + 5; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        n = 10 * n + (*p - '0');
        if (n >= TTT_MAX_CUDA_DEVICES) return 0;
    }
    *d = ttt_device_cuda((int)n);
    return 1;
}

int ttt_train_parse_devices(const char *text, ttt_device *out, int max, int *n, char *why,
                            size_t len) {
    *n = 0;
    const char *p = text;
    while (*p == ' ') p++;
    /* a bare count N: cuda:0 … cuda:N−1 */
    if (*p >= '0' && *p <= '9') {
        char *end = NULL;
        const long c = strtol(p, &end, 10);
        while (*end == ' ') end++;
        if (*end == '\0') {
            if (c < 1 || c > max) {
                snprintf(why, len, "%ld GPUs: expected 1 to %d", c, max);
                return 0;
            }
            for (long i = 0; i < c; i++) out[(*n)++] = ttt_device_cuda((int)i);
            return 1;
        }
    }
    while (*p) {
        char item[64];
        size_t k = 0;
        while (*p && *p != ',') {
            if (*p != ' ' && k + 1 < sizeof item) item[k++] = *p;
            p++;
        }
        item[k] = '\0';
        if (*p == ',') p++;
        if (!k) {
            snprintf(why, len, "an empty entry");
            return 0;
        }
        /* cuda:A-B: a range */
        const char *dash = strchr(item, '-');
        ttt_device a, b;
        if (dash) {
            char lo[64];
            memcpy(lo, item, (size_t)(dash - item));
            lo[dash - item] = '\0';
            char hi[72];
            snprintf(hi, sizeof hi, "cuda:%s", dash + 1);
            if (!ttt_train_parse_device(lo, &a) || ttt_device_is_host(a) ||
                !ttt_train_parse_device(hi, &b) || b.index < a.index) {
                snprintf(why, len, "'%s' is not a range cuda:A-B with A <= B", item);
                return 0;
            }
        } else {
            if (!ttt_train_parse_device(item, &a) || ttt_device_is_host(a)) {
                snprintf(why, len, "'%s' is not a GPU (cuda or cuda:N)", item);
                return 0;
            }
            b = a;
        }
        for (int i = a.index; i <= b.index; i++) {
            if (*n >= max) {
                snprintf(why, len, "more than %d ranks", max);
                return 0;
            }
            out[(*n)++] = ttt_device_cuda(i);
        }
    }
    if (!*n) {
        snprintf(why, len, "no device");
        return 0;
    }
    return 1;
}

/* train.devices of a checked map into c (after train.device: it must agree; before
 * train.dtype, which asks whether the step runs on a GPU). */
static ttt_status parse_devices(const ttt_cfg_node *map, ttt_train_config *c, int had_device,
                                ttt_error *err) {
    c->n_devices = 0;
    const ttt_cfg_node *ds = ttt_cfg_get(map, "devices");
    if (!ds) return TTT_OK;
    if (ds->kind != TTT_CFG_SCALAR || !ds->scalar)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ds,
                             "train.devices: expected N, cuda:A-B or a comma-separated list of "
                             "GPUs");
    char why[160];
    if (!ttt_train_parse_devices(ds->scalar, c->devices, TTT_MAX_TRAIN_DEVICES, &c->n_devices,
                                 why, sizeof why))
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ds,
                             "train.devices: %s; expected N (the GPUs cuda:0 to cuda:N-1), "
                             "cuda:A-B, or a comma-separated list of those and cuda:N",
                             why);
    if (had_device && !ttt_device_equal(c->device, c->devices[0])) {
        char a[32], b[32];
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ds,
                             "train.devices starts with %s but train.device is %s: with "
                             "train.devices, leave train.device out (rank 0 is on the first of "
                             "train.devices)",
                             ttt_device_name(c->devices[0], a, sizeof a),
                             ttt_device_name(c->device, b, sizeof b));
    }
    c->device = c->devices[0];
    ttt_cfg_where(ds, c->device_where, sizeof c->device_where);
    return TTT_OK;
}

/* The ranks of train.devices against the batch and this machine's GPUs. */
static ttt_status check_devices(const ttt_cfg_node *map, const ttt_train_config *c,
                                ttt_error *err) {
    const ttt_cfg_node *ds = ttt_cfg_get(map, "devices");
    if (c->n_devices > c->batch)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ds,
                             "train.devices: %d ranks but train.batch is %d: each rank takes at "
                             "least one sequence of a batch",
                             c->n_devices, c->batch);
    for (int i = 0; i < c->n_devices; i++) {
        ttt_error e = {0};
        if (ttt_device_usable(c->devices[i], &e) != TTT_OK)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, ds,
                                 "train.devices: %s; this process cannot train on it (write "
                                 "train.device: cpu, or run on a machine with these GPUs and a "
                                 "build with CUDA)",
                                 e.msg);
    }
    return TTT_OK;
}

/* train.device and train.dtype of a checked map into c; the refusals of train.h. */
static ttt_status parse_placement(const ttt_cfg_node *map, ttt_train_config *c, ttt_error *err) {
    c->device = ttt_device_host();
    c->dtype = TTT_DTYPE_F32;
    const ttt_cfg_node *dev = ttt_cfg_get(map, "device");
    const ttt_cfg_node *dt = ttt_cfg_get(map, "dtype");
    if (dev) {
        /* the schema let only a string through; a tree it did not check still gets words */
        if (dev->kind != TTT_CFG_SCALAR || !dev->scalar)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, dev,
                                 "train.device: expected cpu, cuda or cuda:N (N a device number "
                                 "from 0)");
        if (!ttt_train_parse_device(dev->scalar, &c->device)) {
            static const char *const names[] = {"cpu", "cuda"};
            const char *close = ttt_closest_name(dev->scalar, names, 2);
            if (close)
                return ttt_cfg_error(err, TTT_ERR_CONFIG, dev,
                                     "train.device: unknown device '%s'; did you mean '%s'? "
                                     "(expected cpu, cuda or cuda:N with N from 0 to %d)",
                                     dev->scalar, close, TTT_MAX_CUDA_DEVICES - 1);
            return ttt_cfg_error(err, TTT_ERR_CONFIG, dev,
                                 "train.device: unknown device '%s'; expected cpu, cuda (the "
                                 "first GPU, cuda:0) or cuda:N with N a device number from 0 to "
                                 "%d",
                                 dev->scalar, TTT_MAX_CUDA_DEVICES - 1);
        }
        ttt_cfg_where(dev, c->device_where, sizeof c->device_where);
    }
    TTT_TRY(parse_devices(map, c, dev != NULL, err));
    if (dt && dt->scalar && strcmp(dt->scalar, "bfloat16") == 0) c->dtype = TTT_DTYPE_BF16;
    if (c->dtype == TTT_DTYPE_BF16 && ttt_device_is_host(c->device))
        return ttt_cfg_error(err, TTT_ERR_CONFIG, dt,
                             "train.dtype: bfloat16 needs train.device: cuda; bfloat16 is the "
                             "GPU's mixed precision (bf16 products, fp32 master weights and "
                             "inner state) and the step on the host runs in float32: write "
                             "dtype: float32, or device: cuda on a GPU machine");
    if (!ttt_device_is_host(c->device) && c->n_devices == 0) { /* else check_devices */
        ttt_error e = {0};
        if (ttt_device_usable(c->device, &e) != TTT_OK)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, dev,
                                 "train.device: %s; this process cannot train on it (write "
                                 "train.device: cpu, or run on a machine with the GPU and a "
                                 "build with CUDA)",
                                 e.msg);
    }
    return TTT_OK;
}

ttt_status ttt_train_device_ready(const ttt_train_config *c, const ttt_seq_model_config *mc,
                                  ttt_error *err) {
    const char *at = c->device_where, *sep = c->device_where[0] ? ": " : "";
    if (ttt_device_is_host(c->device)) {
        /* parse_placement refuses this in a file; a configuration made in code gets the same */
        if (c->dtype == TTT_DTYPE_BF16)
            return ttt_error_set(err, TTT_ERR_CONFIG,
                                 "%s%strain.dtype: bfloat16 needs train.device: cuda; bfloat16 is "
                                 "the GPU's mixed precision (bf16 products, fp32 master weights "
                                 "and inner state) and the step on the host runs in float32: "
                                 "write dtype: float32, or device: cuda on a GPU machine",
                                 at, sep);
        return TTT_OK;
    }
    char dev[32];
    ttt_device_name(c->device, dev, sizeof dev);
    if (!mc) return TTT_OK;
    if (mc->io.packed) /* the lm task refuses this in a file; a configuration made in code too */
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "%s%strain.device: %s: packed documents (task.doc_separator) train "
                             "on the host only; nothing was trained (write train.device: cpu)",
                             at, sep, dev);
    const ttt_mixer *mx = ttt_mixer_at(mc->mixer);
    char why[512];
    const char *no = !mx ? "it is not a registered mixer"
                     : !mx->device_refuse
                         ? "its block has steps without a device implementation (it names "
                           "no device_refuse; docs/training.md lists the mixers that run on a "
                           "CUDA device)"
                         : mx->device_refuse(mc, why, sizeof why);
    if (no)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "%s%strain.device: %s: model.mixer %s does not run on a CUDA "
                             "device: %s; nothing was trained (write train.device: cpu to train "
                             "on the host)",
                             at, sep, dev, mx ? mx->name : "?", no);
    return TTT_OK;
}

/* The train section read into c; `map` is the plan's copy of the section, which the check
 * completes with the defaults (the section as config.resolved.yaml shows it). */
static ttt_status parse_train(ttt_cfg_node *map, ttt_train_config *c, ttt_error *err) {
    /* device and dtype are checked with the rest, and their defaults taken out again when they
     * were not given (train.h) */
    const int had_device = ttt_cfg_get(map, "device") != NULL;
    const int had_dtype = ttt_cfg_get(map, "dtype") != NULL;
    const int had_devices = ttt_cfg_get(map, "devices") != NULL;
    const int had_recompute = ttt_cfg_get(map, "recompute") != NULL;
    ttt_status cs = ttt_cfg_check_map(map, "train", ttt_train_options, NULL, err);
    if (!had_device) ttt_cfg_map_remove(map, "device");
    if (!had_dtype) ttt_cfg_map_remove(map, "dtype");
    if (!had_devices) ttt_cfg_map_remove(map, "devices");
    if (cs != TTT_OK) return cs;
    c->recompute = had_recompute ? (int)ttt_cfg_int(map, "recompute") : 0;
    if (!had_recompute) ttt_cfg_map_remove(map, "recompute");
    TTT_TRY(parse_placement(map, c, err));
    c->steps = ttt_cfg_int(map, "steps");
    c->batch = (int)ttt_cfg_int(map, "batch");
    c->shards = (int)ttt_cfg_int(map, "shards");
    c->threads = (int)ttt_cfg_int(map, "threads");
    if (c->shards > c->batch) c->shards = c->batch; /* a shard holds at least one sequence */
    TTT_TRY(check_devices(map, c, err));
    ttt_adamw_config_default(&c->adamw);
    c->adamw.lr = ttt_cfg_float(map, "lr");
    c->adamw.beta1 = ttt_cfg_float(map, "beta1");
    c->adamw.beta2 = ttt_cfg_float(map, "beta2");
    c->adamw.eps = ttt_cfg_float(map, "eps");
    c->adamw.weight_decay = ttt_cfg_float(map, "weight_decay");
    c->adamw.warmup = ttt_cfg_int(map, "warmup");
    c->adamw.total_steps = c->steps;
    c->adamw.min_lr_ratio = ttt_cfg_float(map, "min_lr_ratio");
    c->adamw.clip_norm = ttt_cfg_float(map, "clip");
    if (c->adamw.warmup >= c->steps) c->adamw.warmup = c->steps - 1; /* T > W (adamw.h) */
    c->eval_every = ttt_cfg_int(map, "eval_every");
    c->log_every = ttt_cfg_int(map, "log_every");
    c->checkpoint_every = ttt_cfg_int(map, "checkpoint_every");
    c->stop_at = ttt_cfg_int(map, "stop_at");
    ttt_status s = ttt_adamw_config_check(&c->adamw, err);
    if (s != TTT_OK) ttt_error_prefix(err, "train");
    return s;
}

ttt_status ttt_train_config_parse_section(const ttt_cfg_node *map, ttt_train_config *c,
                                          ttt_cfg_node **resolved, ttt_error *err) {
    memset(c, 0, sizeof *c);
    *resolved = NULL;
    if (map->kind != TTT_CFG_MAP)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, map, "train: expected a mapping");
    ttt_cfg_node *copy = ttt_cfg_clone(map);
    if (!copy) return ttt_cfg_out_of_memory(err, "train");
    ttt_status s = parse_train(copy, c, err);
    if (s == TTT_OK) *resolved = copy;
    else ttt_cfg_free(copy);
    return s;
}

ttt_status ttt_train_config_parse(ttt_cfg_node *map, ttt_train_config *c, ttt_error *err) {
    ttt_cfg_node *r = NULL;
    ttt_status s = ttt_train_config_parse_section(map, c, &r, err);
    if (r) {
        ttt_cfg_swap(map, r);
        ttt_cfg_free(r);
    }
    return s;
}
