/* The `lm` task (docs/math.md §7): byte-level language modelling on a text file.
 *
 * The file's last val_fraction is the validation split (data.h). Training batches are random
 * windows of the training split (their rng is checkpointed); evaluation scores the first
 * eval_windows non-overlapping windows of the validation split, every byte once. The metric is
 * bits per byte (mean cross-entropy in nats / ln 2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"
#include "fault.h"
#include "task.h"
#include "trained.h"

/* The English corpus of the Debian package dasher-data (apt-get install dasher-data). */
#define LM_DEFAULT_PATH "/usr/share/dasher/training_english_GB.txt"

static const ttt_option lm_options[] = {
    {"path", TTT_OPT_STRING, LM_DEFAULT_PATH, TTT_NO_RANGE, NULL,
     "text file (bytes are tokens) or token file (format uint16/uint32); default: the English "
     "corpus of the Debian package dasher-data"},
    {"format", TTT_OPT_CHOICE, "text", TTT_NO_RANGE, "text|uint16|uint32",
     "text: every byte is a token (vocabulary 256); uint16/uint32: little-endian token ids, "
     "as nanoGPT's train.bin / val.bin"},
    {"vocab", TTT_OPT_INT, "0", 0, 1 << 30, NULL,
     "vocabulary size of a token file (every id must be below it; GPT-2's is 50257); 0 for text"},
    {"val_path", TTT_OPT_STRING, "", TTT_NO_RANGE, NULL,
     "validation tokens in a file of their own (same format; e.g. val.bin); empty: the last "
     "val_fraction of path"},
    {"seq_len", TTT_OPT_INT, "128", 1, 1 << 20, NULL, "bytes per training window"},
    {"val_fraction", TTT_OPT_FLOAT, "0.1", 0.0, 0.9, NULL,
     "the last fraction of the file is the validation split (without val_path)"},
    {"eval_windows", TTT_OPT_INT, "256", 1, 1e9, NULL,
     "validation windows scored at each evaluation (at most all of them)"},
    {"eval_batch", TTT_OPT_INT, "64", 1, 1 << 20, NULL, "windows per evaluation batch"},
    {"doc_separator", TTT_OPT_INT, "-1", -1, (1 << 30) - 1, NULL,
     "packed documents: this token id begins a new document wherever it stands (GPT-2's "
     "<|endoftext|> 50256; a byte for text); the model runs each document of a window as a "
     "sequence of its own, and the separator is never a target; -1 = off"},
    TTT_OPTION_END,
};

/* The parsed configuration of a point. */
typedef struct lm_cfg {
    char *path;           /* the text or token file (malloc'd) */
    char *val_path;       /* the validation token file (malloc'd), NULL without */
    char path_where[512]; /* where `task.path` was given (file:line:col), for errors at run time */
    int width;            /* bytes per token: 1 text, 2 uint16, 4 uint32 */
    int vocab;
    int seq_len, eval_batch;
    int doc_sep; /* the token that begins a document, -1 = not packed */
    double val_fraction;
    long eval_windows;
    ttt_trained_cfg trained;
} lm_cfg;

static void lm_cfg_free(void *cfg) {
    lm_cfg *c = cfg;
    free(c->path);
    free(c->val_path);
    c->path = c->val_path = NULL;
}

/* "<where>: task.path: <err>", located at the `path` the file gave, naming the Debian package
 * of the default corpus when that is what is missing. */
static ttt_status path_error(const lm_cfg *c, ttt_status s, ttt_error *err) {
    char msg[TTT_ERROR_MSG_LEN], full[TTT_ERROR_MSG_LEN + 160];
    snprintf(msg, sizeof msg, "%s", err->msg);
    if (strcmp(c->path, LM_DEFAULT_PATH) == 0 && s == TTT_ERR_IO)
        snprintf(full, sizeof full,
                 "task.path: %s (the Debian package dasher-data provides it: `apt-get install "
                 "dasher-data`; or give another text file)",
                 msg);
    else
        snprintf(full, sizeof full, "task.path: %s", msg);
    full[TTT_ERROR_MSG_LEN - 1] = '\0'; /* the bound a located message has */
    return ttt_error_set(err, s, "%s: %s", c->path_where, full);
}

/* task.doc_separator into c->doc_sep: an id of the vocabulary, and the step on the host (the
 * device step does not split a window into documents). Checked before the train section is, so
 * that `ttt check` names this combination also where no GPU is (where train.device: cuda would
 * otherwise be refused for the missing GPU alone). */
static ttt_status parse_doc_separator(lm_cfg *c, const ttt_cfg_node *root,
                                      const ttt_cfg_node *task, ttt_error *err) {
    const ttt_cfg_node *node = ttt_cfg_get(task, "doc_separator");
    c->doc_sep = (int)ttt_cfg_int(task, "doc_separator");
    if (c->doc_sep < 0) return TTT_OK;
    if (c->doc_sep >= c->vocab)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, node,
                             "task.doc_separator: %d is not a token id of the vocabulary; "
                             "expected -1 (off) or an id in [0, %d)%s",
                             c->doc_sep, c->vocab,
                             c->width == 1 ? " (a byte of the text file)" : " (task.vocab)");
    const ttt_cfg_node *train = ttt_cfg_get(root, "train");
    const ttt_cfg_node *dev = train && train->kind == TTT_CFG_MAP ? ttt_cfg_get(train, "device")
                                                                  : NULL;
    const ttt_cfg_node *devs =
        train && train->kind == TTT_CFG_MAP ? ttt_cfg_get(train, "devices") : NULL;
    ttt_device d = ttt_device_host();
    const int gpu = devs || (dev && dev->kind == TTT_CFG_SCALAR && dev->scalar &&
                             ttt_train_parse_device(dev->scalar, &d) && !ttt_device_is_host(d));
    if (gpu) {
        char where[512];
        ttt_cfg_where(devs ? devs : dev, where, sizeof where);
        return ttt_cfg_error(err, TTT_ERR_UNSUPPORTED, node,
                             "task.doc_separator: packed documents train on the host only, "
                             "not on a CUDA device (%s given at %s): the device step does not "
                             "split a window into its documents; write train.device: cpu, or "
                             "leave doc_separator out (-1)",
                             devs ? "train.devices" : "train.device", where);
    }
    return TTT_OK;
}

static ttt_status lm_parse(void *cfg, const ttt_cfg_node *root, ttt_cfg_node *sections,
                           ttt_error *err) {
    lm_cfg *c = cfg;
    const ttt_cfg_node *task = ttt_cfg_get(root, "task");
    const int L = (int)ttt_cfg_int(task, "seq_len");
    const double vf = ttt_cfg_float(task, "val_fraction");
    if (vf <= 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(task, "val_fraction"),
                             "task.val_fraction: the lm task evaluates on a validation split; "
                             "it must be > 0");
    const char *fmt = ttt_cfg_str(task, "format");
    c->width = strcmp(fmt, "uint16") == 0 ? 2 : strcmp(fmt, "uint32") == 0 ? 4 : 1;
    c->vocab = (int)ttt_cfg_int(task, "vocab");
    if (c->width == 1 && c->vocab != 0 && c->vocab != TTT_LM_VOCAB)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(task, "vocab"),
                             "task.vocab: a text file's tokens are its bytes (vocabulary 256); "
                             "expected 0, or format uint16/uint32 for a file of token ids");
    if (c->width == 1) c->vocab = TTT_LM_VOCAB;
    if (c->width > 1 && c->vocab == 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(task, "format"),
                             "task.vocab: a %s token file needs its vocabulary size (e.g. "
                             "vocab: 50257 for GPT-2's tokens)",
                             fmt);
    if (c->width == 2 && c->vocab > 65536)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(task, "vocab"),
                             "task.vocab: %d ids do not fit uint16 tokens; expected at most "
                             "65536, or format: uint32",
                             c->vocab);
    const char *vp = ttt_cfg_str(task, "val_path");
    if (vp && vp[0] && !(c->val_path = ttt_fault_strdup(vp)))
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    c->seq_len = L;
    c->val_fraction = vf;
    c->eval_windows = ttt_cfg_int(task, "eval_windows");
    c->eval_batch = (int)ttt_cfg_int(task, "eval_batch");
    ttt_cfg_where(ttt_cfg_get(task, "path"), c->path_where, sizeof c->path_where);
    if (!(c->path = ttt_fault_strdup(ttt_cfg_str(task, "path"))))
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for task.path");
    /* The files are checked here (opened, their sizes against the splits; not read), so that
     * `ttt check` refuses what the run would and a run refuses before it creates its folder
     * (docs/hardening.md "Out of memory"); lm_run loads them and checks every id. */
    /* Only regular files: opening a FIFO would wait for a writer forever, in `ttt check` too. */
    const char *files[2] = {c->path, c->val_path};
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if (files[i] && stat(files[i], &st) == 0 && !S_ISREG(st.st_mode)) {
            ttt_error_set(err, TTT_ERR_IO, "lm: '%s' is not a regular file", files[i]);
            return path_error(c, TTT_ERR_IO, err);
        }
    }
    const ttt_token_source src = {.path = c->path, .val_path = c->val_path, .width = c->width,
                                  .vocab = c->vocab, .val_fraction = vf, .seq_len = L};
    ttt_status s = ttt_tokens_check(&src, err);
    if (s != TTT_OK) return path_error(c, s, err);
    TTT_TRY(parse_doc_separator(c, root, task, err));
    ttt_seq_model_io io = {.vocab = c->vocab, .seq_len = L, .packed = c->doc_sep >= 0,
                           .doc_sep = c->doc_sep};
    return ttt_trained_parse(&c->trained, root, sections, &io, err);
}

static long lm_work(const void *cfg) { return ((const lm_cfg *)cfg)->trained.train.steps; }

typedef struct lm_data {
    ttt_text text;
    ttt_rng rng; /* training windows */
    ttt_batch batch, eval;
    int n_windows; /* validation windows scored */
    int doc_sep;   /* task.doc_separator, -1 = off */
} lm_data;

static ttt_status next(void *user, ttt_seq_batch *out, ttt_error *err) {
    lm_data *d = user;
    ttt_text_sample(&d->text, TTT_SPLIT_TRAIN, &d->rng, &d->batch);
    if (d->doc_sep >= 0) ttt_batch_ignore_label(&d->batch, d->doc_sep);
    *out = (ttt_seq_batch){.B = d->batch.B, .T = d->batch.L, .tokens = d->batch.tokens,
                           .labels = d->batch.labels};
    return TTT_OK;
}

static void get_state(void *user, uint64_t *w) { memcpy(w, ((lm_data *)user)->rng.s, 32); }
static ttt_status set_state(void *user, const uint64_t *w, ttt_error *err) {
    memcpy(((lm_data *)user)->rng.s, w, 32);
    return TTT_OK;
}

static ttt_status eval_batch(void *user, int i, ttt_seq_batch *out, ttt_error *err) {
    lm_data *d = user;
    const size_t first = (size_t)i * d->eval.B;
    int n = ttt_text_windows(&d->text, TTT_SPLIT_VAL, first, &d->eval);
    /* rows past the windows of this evaluation are not scored */
    for (int r = 0; r < d->eval.B; r++)
        if ((long)first + r >= d->n_windows || r >= n)
            for (int t = 0; t < d->eval.L; t++) d->eval.labels[(size_t)r * d->eval.L + t] =
                TTT_LABEL_IGNORE;
    if (d->doc_sep >= 0) ttt_batch_ignore_label(&d->eval, d->doc_sep);
    int rows = d->n_windows - (int)first < d->eval.B ? d->n_windows - (int)first : d->eval.B;
    *out = (ttt_seq_batch){.B = rows, .T = d->eval.L, .tokens = d->eval.tokens,
                           .labels = d->eval.labels};
    return TTT_OK;
}

static void lm_data_free(lm_data *d) {
    ttt_text_free(&d->text);
    ttt_batch_free(&d->batch);
    ttt_batch_free(&d->eval);
}

static ttt_status lm_run(ttt_task_run *run, ttt_error *err) {
    const lm_cfg *c = run->cfg;
    const int L = c->seq_len;
    const int B = c->trained.train.batch;
    lm_data d;
    memset(&d, 0, sizeof d);
    ttt_rng root;
    ttt_rng_seed(&root, run->seed);
    d.rng = ttt_rng_fork(&root, ttt_hash_str("lm/windows"));
    d.doc_sep = c->doc_sep;
    const ttt_token_source src = {.path = c->path, .val_path = c->val_path, .width = c->width,
                                  .vocab = c->vocab, .val_fraction = c->val_fraction,
                                  .seq_len = L};
    ttt_status s = ttt_tokens_load(&d.text, &src, err);
    if (s != TTT_OK) path_error(c, s, err);
    if (s == TTT_OK) s = ttt_batch_init(&d.batch, B, L, err);
    if (s == TTT_OK) s = ttt_batch_init(&d.eval, c->eval_batch, L, err);
    if (s != TTT_OK) {
        lm_data_free(&d);
        return s;
    }
    size_t nw = ttt_text_n_windows(&d.text, TTT_SPLIT_VAL, L);
    long want = c->eval_windows;
    d.n_windows = (int)((long)nw < want ? (long)nw : want);
    ttt_train_data td = {
        .user = &d,
        .next = next,
        .n_state = 4,
        .get_state = get_state,
        .set_state = set_state,
        .n_eval = (d.n_windows + d.eval.B - 1) / d.eval.B,
        .eval_batch = eval_batch,
        .bits = c->width == 1, /* bits per byte only where a token is a byte */
    };
    ttt_trained tr;
    s = ttt_train_point(run, &c->trained, &td, &tr, err);
    if (s == TTT_OK && !tr.result.stopped) {
        ttt_record r;
        ttt_trained_record(run, &tr, &r);
        /* bits per token: per byte for text (ttt_bits_per_byte converts nats to bits) */
        const char *per = c->width == 1 ? "bpb" : "bpt";
        char key[32];
        snprintf(key, sizeof key, "train_%s", per);
        ttt_record_num(&r, key, ttt_bits_per_byte(tr.result.train_loss));
        snprintf(key, sizeof key, "eval_%s", per);
        ttt_record_num(&r, key, ttt_bits_per_byte(tr.result.eval_loss));
        ttt_record_num(&r, "eval_accuracy", tr.result.eval_accuracy);
        ttt_record_num(&r, c->width == 1 ? "eval_bytes" : "eval_tokens",
                       (double)tr.result.eval.count);
        ttt_results_add(run->results, &r, 1);
    }
    if (s == TTT_OK) ttt_trained_free(&tr);
    lm_data_free(&d);
    return s;
}

static void lm_charts(ttt_results *res, const void *cfg) {
    /* bits per byte for text; for token files the loss in nats per token, as the trainer logs
     * it (the evaluation loss is among the trained tasks' own charts) */
    const int text = ((const lm_cfg *)cfg)->width == 1;
    if (text) {
        ttt_chart c = ttt_chart_make("eval_bpb", "Validation bits per byte", "step", "eval_bpb",
                                     "series", "training step", "bits per byte");
        ttt_results_add_chart_filtered(res, &c, "kind", "eval");
    }
    ttt_chart l = ttt_chart_make(text ? "train_bpb" : "train_loss",
                                 text ? "Training bits per byte" : "Training loss", "step",
                                 text ? "loss_bpb" : "loss", "series", "training step",
                                 text ? "bits per byte" : "nats per token");
    ttt_results_add_chart_filtered(res, &l, "kind", "train");
    ttt_trained_charts(res, text ? "cross-entropy (nats)" : "nats per token");
    ttt_results_set_main(res, text ? "eval_bpb" : "eval_bpt", "");
}

/* `ttt sample`: text models read the prompt as bytes and write bytes; token-file models read
 * and write ids separated by spaces or commas. */
static ttt_status lm_sample(const ttt_task_sample *q, ttt_error *err) {
    const lm_cfg *c = q->cfg;
    const char *prompt = q->prompt ? q->prompt : "";
    const size_t plen = strlen(prompt);
    int *ids = malloc((plen + 1) * sizeof *ids), n = 0;
    int *gen = malloc(((size_t)q->n_tokens + 1) * sizeof *gen);
    if (!ids || !gen) {
        free(ids), free(gen);
        return ttt_error_set(err, TTT_ERR_NOMEM, "sample: out of memory");
    }
    ttt_status s = TTT_OK;
    if (c->width == 1) {
        for (size_t i = 0; i < plen; i++) ids[n++] = (unsigned char)prompt[i];
        if (n == 0) ids[n++] = '\n'; /* an empty prompt starts a new line */
    } else {
        for (const char *p = prompt; *p && s == TTT_OK;) {
            if (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') {
                p++;
                continue;
            }
            char *end;
            const long v = strtol(p, &end, 10);
            if (end == p || v < 0 || v >= c->vocab)
                s = ttt_error_set(err, TTT_ERR_ARG,
                                  "sample: --prompt '%s': expected token ids below the "
                                  "vocabulary size %d, separated by spaces or commas",
                                  prompt, c->vocab);
            else
                ids[n++] = (int)v;
            p = end;
        }
        if (s == TTT_OK && n == 0)
            s = ttt_error_set(err, TTT_ERR_ARG,
                              "sample: a token-file model needs a prompt of token ids "
                              "(--prompt '13 7 42')");
    }
    if (s == TTT_OK)
        s = ttt_trained_generate(gen, &c->trained, q->run_dir, q->point, ids, n, q->n_tokens,
                                 c->seq_len, q->temperature, q->top_k, q->seed, err);
    if (s == TTT_OK) {
        if (c->width == 1) {
            fwrite(prompt, 1, plen, q->out);
            for (int i = 0; i < q->n_tokens; i++) fputc(gen[i], q->out);
            fputc('\n', q->out);
        } else {
            for (int i = 0; i < q->n_tokens; i++) fprintf(q->out, "%s%d", i ? " " : "", gen[i]);
            fputc('\n', q->out);
        }
    }
    free(ids), free(gen);
    return s;
}

static const char *const lm_columns[] = {"series", "steps", "train_bpb", "eval_bpb",
                                         "eval_accuracy", "params", "seconds", NULL};
static const char *const lm_token_columns[] = {"series", "steps", "train_bpt", "eval_bpt",
                                               "eval_accuracy", "params", "seconds", NULL};
static const char *const *lm_columns_for(const void *cfg) {
    return ((const lm_cfg *)cfg)->width == 1 ? lm_columns : lm_token_columns;
}

static const ttt_seq_model_config *lm_model(const void *cfg) {
    return &((const lm_cfg *)cfg)->trained.model;
}

static const ttt_trained_cfg *lm_trained(const void *cfg) {
    return &((const lm_cfg *)cfg)->trained;
}

/* The `task:` section from what lm_parse read. `vocab` is the option's value: 0 for text, whose
 * vocabulary (256) the parse fills in. */
static ttt_status lm_section(const void *cfg, const ttt_cfg_node *given, ttt_cfg_node **out,
                             ttt_error *err) {
    const lm_cfg *c = cfg;
    const ttt_task_value v[] = {
        {.key = "path", .text = c->path},
        {.key = "format", .text = c->width == 2 ? "uint16" : c->width == 4 ? "uint32" : "text"},
        {.key = "vocab", .number = c->width == 1 ? 0 : c->vocab},
        {.key = "val_path", .text = c->val_path},
        {.key = "seq_len", .number = c->seq_len},
        {.key = "val_fraction", .number = c->val_fraction},
        {.key = "eval_windows", .number = (double)c->eval_windows},
        {.key = "eval_batch", .number = c->eval_batch},
        {.key = "doc_separator", .number = c->doc_sep},
    };
    TTT_TRY(ttt_task_section(lm_options, given, v, (int)(sizeof v / sizeof *v), out, err));
    /* off and not given: left out, so that config.resolved.yaml and the configuration hash of
     * an experiment without packed documents stay what they were before the option existed */
    if (c->doc_sep < 0 && !ttt_cfg_get(given, "doc_separator"))
        ttt_cfg_map_remove(*out, "doc_separator");
    return TTT_OK;
}

const ttt_task ttt_task_lm = {
    .name = "lm",
    .help = "language modelling on the bytes of a text file or on token files (nanoGPT's "
            "uint16/uint32 .bin), trained: validation bits per byte (per token)",
    .options = lm_options,
    .cfg_size = sizeof(lm_cfg),
    .parse = lm_parse,
    .section = lm_section,
    .cfg_free = lm_cfg_free,
    .work = lm_work,
    .run = lm_run,
    .model = lm_model,
    .trained = lm_trained,
    .columns = lm_columns,
    .columns_for = lm_columns_for,
    .charts = lm_charts,
    .sample = lm_sample,
    .tiny = "task: {kind: lm, path: tiny.txt, seq_len: 8, eval_windows: 4, eval_batch: 4}\n"
            "model: {d_model: 8, layers: 1, heads: 1, mlp: 0}\n"
            "layer: {preset: deltanet}\n"
            "train: {steps: 3, batch: 2, log_every: 1, eval_every: 0, checkpoint_every: 0}\n",
};
