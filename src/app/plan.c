/* The plan pass (plan.h, docs/design.md "Data flow"): the points of an experiment, checked. */
#define _XOPEN_SOURCE 700 /* nftw */
#define _DEFAULT_SOURCE /* flock, gethostname alongside it */
#include "plan.h"
#include "fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "comm.h"
#include "experiment.h"
#include "point_records.h"
#include "progress.h"
#include "provenance.h"
#include "results.h"
#include "strbuf.h"
#include "train.h"
#include "plan_internal.h"

/* Keys allowed at the top level besides the options: the sweep (expanded away before a point
 * is checked) and the informational `resolved` list a previous run wrote. */
static const char *const top_extra[] = {"sweep", "resolved", NULL};

/* The longest `output:` path (bytes): the run folder's files are named in 4096-byte buffers,
 * with room for "/checkpoints/point<i>/ckpt-last.safetensors" and the like. */
#define TTT_PLAN_MAX_OUTPUT 3072

/* Name the sweep point after the message, so the message still starts with file:line:col. */
void ttt_plan_error_suffix_point(ttt_error *err, const char *label) {
    /* An error located at a --set option is about the option, whichever point found it first:
     * naming that point would suggest the sweep is at fault. */
    if (strncmp(err->msg, "--set ", 6) == 0) return;
    size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, " (in sweep point %s)", label);
}

/* Two axes `P.name` and `P.key` vary independently, so every name is given `key`, which only
 * some of them take (sweeping the optimizer with `momentum` fails on sgd). When the error is
 * that unknown key, say how to sweep what was meant: one axis of mappings. */
static void error_hint_axes(ttt_error *err, const ttt_cfg_node *sweep) {
    if (!sweep || sweep->kind != TTT_CFG_MAP) return;
    for (int a = 0; a < sweep->n; a++) {
        const char *ka = sweep->keys[a], *dot = strrchr(ka, '.');
        if (!dot || strcmp(dot + 1, "name") != 0) continue;
        const size_t plen = (size_t)(dot - ka);
        for (int b = 0; b < sweep->n; b++) {
            const char *kb = sweep->keys[b];
            if (b == a || strncmp(kb, ka, plen) != 0 || kb[plen] != '.' ||
                strchr(kb + plen + 1, '.'))
                continue;
            char needle[160];
            snprintf(needle, sizeof needle, "unknown key '%s'", kb + plen + 1);
            if (!strstr(err->msg, needle)) continue;
            size_t n = strlen(err->msg);
            snprintf(err->msg + n, sizeof err->msg - n,
                     "; the sweep axes '%s' and '%s' vary independently, so every %.*s gets "
                     "'%s': to give it only to some, sweep one list of mappings instead, e.g. "
                     "'%.*s: [{name: sgd}, {name: momentum, momentum: 0.9}]'",
                     ka, kb, (int)plen, ka, kb + plen + 1, (int)plen, ka);
            return;
        }
    }
}

/* The configuration hash of a resolved point: everything but the keys that name or place the
 * run (name, description, output) and those that do not change its results (train.stop_at,
 * train.threads, train.data_parallel, train.devices, train.recompute). Checkpoints store it;
 * changing the definition orphans every checkpoint. train.device and train.dtype count as their
 * values (cpu and float32 as absent), and so does task.doc_separator (-1 as absent). */
void ttt_plan_config_hash(const ttt_cfg_node *root, char hash[17]) {
    ttt_cfg_node *h = ttt_cfg_clone(root);
    ttt_cfg_map_remove(h, "name");
    ttt_cfg_map_remove(h, "description");
    ttt_cfg_map_remove(h, "output");
    ttt_cfg_map_remove(h, "seeds");  /* a point's own seed is `seed`; */
    ttt_cfg_map_remove(h, "charts"); /* how its results are drawn changes none of them */
    ttt_cfg_map_remove(h, "results"); /* nor how they are reported */
    /* the lm task's doc_separator is written only when given (lm.c): off (-1) hashes as
     * absent, so that a run that names it continues one that did not */
    ttt_cfg_node *task = (ttt_cfg_node *)ttt_cfg_get(h, "task");
    const ttt_cfg_node *ds = task ? ttt_cfg_get(task, "doc_separator") : NULL;
    if (ds && ds->scalar && strcmp(ds->scalar, "-1") == 0)
        ttt_cfg_map_remove(task, "doc_separator");
    ttt_cfg_node *tr = (ttt_cfg_node *)ttt_cfg_get(h, "train");
    if (tr) {
        ttt_cfg_map_remove(tr, "stop_at");
        ttt_cfg_map_remove(tr, "threads");
        ttt_cfg_map_remove(tr, "data_parallel");
        /* the ranks over GPUs change results by rounding only (docs/scaling.md "Several
         * GPUs"): a run resumes on another number of GPUs */
        ttt_cfg_map_remove(tr, "devices");
        /* recomputed blocks give the kept blocks' gradients bit for bit (docs/training.md
         * "Memory of a training step"): a run may resume with more or fewer */
        ttt_cfg_map_remove(tr, "recompute");
        /* train.device and train.dtype are written only when given (train.h): their defaults
         * and `cuda` (= cuda:0) hash as what they mean, so that a run that names them continues
         * one that did not */
        const ttt_cfg_node *dev = ttt_cfg_get(tr, "device");
        const ttt_cfg_node *dt = ttt_cfg_get(tr, "dtype");
        /* decided before either node is removed or replaced (which frees it) */
        const int dev_cpu = dev && dev->scalar && strcmp(dev->scalar, "cpu") == 0;
        const int dev_cuda = dev && dev->scalar && strcmp(dev->scalar, "cuda") == 0;
        const int dt_f32 = dt && dt->scalar && strcmp(dt->scalar, "float32") == 0;
        if (dev_cpu) ttt_cfg_map_remove(tr, "device");
        if (dev_cuda) ttt_cfg_map_set(tr, "device", ttt_cfg_new_scalar("cuda:0", dev));
        if (dt_f32) ttt_cfg_map_remove(tr, "dtype");
    }
    char *flow = ttt_cfg_to_flow(h);
    ttt_cfg_free(h);
    ttt_checkpoint_config_hash(flow ? flow : "", hash);
    free(flow);
}

/* The first control character of s (C0, DEL or a C1 code point written in UTF-8), or NULL.
 * Such characters in a folder name or a message would act on the terminal that prints them. */
static const unsigned char *control_char(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) return p;
        if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) return p;
    }
    return NULL;
}

/* `name` becomes the folder runs/<name> and the title of messages and the page: one plain
 * folder name, so a run can neither write outside runs/ nor into runs/ itself
 * (docs/hardening.md "Run folders: names, one writer, re-runs"). */
static ttt_status check_name(const ttt_cfg_node *root, ttt_error *err) {
    const ttt_cfg_node *n = ttt_cfg_get(root, "name");
    const char *s = n && n->scalar ? n->scalar : "";
    const unsigned char *c = control_char(s);
    if (c)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "name: control character 0x%02x at byte %d; a name becomes a folder "
                             "name and is printed, so it must be printable text",
                             *c, (int)(c - (const unsigned char *)s));
    if (!s[0])
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "name: empty; expected a folder name (the run goes to runs/<name>)");
    if (strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "name: '%s' is not a plain folder name (no '/', not '.' or '..'): "
                             "the run goes to runs/<name>; use `output:` or --out to place it "
                             "elsewhere", s);
    /* a folder name the file system refuses ("File name too long") would fail the run only
     * when it creates the folder; `ttt check` refuses it here */
    if (strlen(s) > NAME_MAX)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "name: %zu bytes; a name becomes the folder runs/<name>, and a "
                             "folder name has at most %d bytes", strlen(s), NAME_MAX);
    const ttt_cfg_node *o = ttt_cfg_get(root, "output");
    if (o && o->scalar && (c = control_char(o->scalar)))
        return ttt_cfg_error(err, TTT_ERR_CONFIG, o,
                             "output: control character 0x%02x at byte %d; expected a printable "
                             "folder path", *c, (int)(c - (const unsigned char *)o->scalar));
    if (o && o->scalar) {
        if (strlen(o->scalar) >= TTT_PLAN_MAX_OUTPUT)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, o,
                                 "output: %zu bytes; expected a folder path of less than %d "
                                 "bytes", strlen(o->scalar), TTT_PLAN_MAX_OUTPUT);
        for (const char *q = o->scalar; *q;) {
            const size_t len = strcspn(q, "/");
            if (len > NAME_MAX)
                return ttt_cfg_error(err, TTT_ERR_CONFIG, o,
                                     "output: the folder name at byte %d has %zu bytes; a "
                                     "folder name has at most %d", (int)(q - o->scalar), len,
                                     NAME_MAX);
            q += len;
            while (*q == '/') q++;
        }
    }
    return TTT_OK;
}

/* A file the run reads at its start, checked when the plan is built so that `ttt check`
 * refuses what the run would fail on: it must exist and be a regular file (a FIFO would block
 * the reader; a folder is a mistake). */
static ttt_status check_input_file(const ttt_cfg_node *n, const char *what, ttt_error *err) {
    if (!n || n->kind != TTT_CFG_SCALAR || !n->scalar || !n->scalar[0]) return TTT_OK;
    struct stat st;
    if (stat(n->scalar, &st) != 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n, "%s: cannot read '%s': %s", what, n->scalar,
                             strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "%s: '%s' is not a regular file; expected a file `ttt export` "
                             "wrote", what, n->scalar);
    return TTT_OK;
}

/* The top level of a point as the plan reads it (ttt_experiment_options) besides what
 * ttt_plan_point keeps: what config.resolved.yaml is written from. */
typedef struct plan_top {
    const char *description; /* "" when not given */
    long seeds;
} plan_top;

/* Validate one point against the registries and let its task read it into pt->cfg. `root` is
 * the plan's own copy of the point, which the checks complete with the defaults (the top level
 * and the task section) and the task then only reads; the sections the task reads through their
 * owners (layer, model, train) are rendered by them into `sections` (docs/design.md "The plan
 * pass"). */
static ttt_status read_point(ttt_plan_point *pt, ttt_cfg_node *root, const char *stem,
                             ttt_cfg_node *sections, plan_top *top, ttt_error *err) {
    ttt_cfg_map_remove(root, "resolved");
    if (!ttt_cfg_get(root, "name")) ttt_cfg_map_set(root, "name", ttt_cfg_new_scalar(stem, root));
    TTT_TRY(ttt_cfg_check_map(root, "", ttt_experiment_options, top_extra, err));
    TTT_TRY(check_name(root, err));
    ttt_cfg_node *task = (ttt_cfg_node *)ttt_cfg_get(root, "task");
    const ttt_cfg_node *kind = ttt_cfg_get(task, "kind");
    if (!kind)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, task,
                             "task: missing 'kind' (one of the tasks in `ttt list`, e.g. memory)");
    if (kind->kind != TTT_CFG_SCALAR || !kind->scalar)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, kind, "task.kind: expected a task name");
    TTT_TRY(ttt_cfg_check_name(kind, "task", ttt_task_names(), ttt_task_count(), err));
    const ttt_task *t = ttt_task_find(kind->scalar);
    static const char *const task_extra[] = {"kind", NULL};
    TTT_TRY(ttt_cfg_check_map(task, "task", t->options, task_extra, err));
    pt->task = t;
    if (!(pt->cfg = ttt_fault_calloc(1, t->cfg_size ? t->cfg_size : 1)))
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
    ttt_size_estimate_reset();
    if (t->parse) TTT_TRY(t->parse(pt->cfg, root, sections, err));
    const ttt_cfg_node *train = ttt_cfg_get(sections, "train");
    if (t->model && train)
        TTT_TRY(check_input_file(ttt_cfg_get(train, "init_from"), "train.init_from", err));
    /* Each piece was checked alone; together they must fit too (data sets and a training step
     * are held at the same time). */
    pt->memory = ttt_size_estimate();
    char what[160];
    snprintf(what, sizeof what, "task: the point (%s) in all", t->name);
    ttt_status ms = ttt_size_check(pt->memory, what, err);
    if (ms != TTT_OK) return ttt_cfg_error(err, ms, task, "%s", err->msg);
    pt->seed = (uint64_t)ttt_cfg_int(root, "seed");
    pt->cost = t->work ? (double)t->work(pt->cfg) : 1.0;
    /* a task that reads no `train:` still takes train.data_parallel as given */
    const ttt_cfg_node *dp = ttt_cfg_get(train ? train : ttt_cfg_get(root, "train"),
                                         "data_parallel");
    pt->parallel = TTT_PARALLEL_AUTO;
    if (dp && dp->kind == TTT_CFG_SCALAR && dp->scalar) {
        if (strcmp(dp->scalar, "true") == 0) pt->parallel = TTT_PARALLEL_DATA;
        if (strcmp(dp->scalar, "false") == 0) pt->parallel = TTT_PARALLEL_POINTS;
    }
    const char *out = ttt_cfg_str(root, "output");
    char buf[512];
    if (!out || !out[0]) {
        snprintf(buf, sizeof buf, "runs/%s", ttt_cfg_str(root, "name"));
        out = buf;
    }
    pt->name = ttt_fault_strdup(ttt_cfg_str(root, "name"));
    pt->output = ttt_fault_strdup(out);
    if (!pt->name || !pt->output)
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
    const char *desc = ttt_cfg_str(root, "description");
    top->description = desc ? desc : "";
    top->seeds = ttt_cfg_int(root, "seeds");
    return TTT_OK;
}

/* The value of top-level key `key` in the point's configuration as config.resolved.yaml shows
 * it, into *out, written by the code that read it: the task's section by the task
 * (ttt_task.section), the sections it read through their owners as they rendered them, the
 * plan's own keys from the values in pt and top. A key the point gave keeps the text it was
 * written with (as checked: `train:` left empty is {}); `output:` given empty is the folder the
 * run uses. `charts:` and `results:`, which the plan reads from the document (plan_columns.c),
 * show as given. *out NULL (counted) when memory runs out. */
static ttt_status top_value(const ttt_plan_point *pt, const plan_top *top, const char *key,
                            const ttt_cfg_node *given, const ttt_cfg_node *root,
                            const ttt_cfg_node *sections, ttt_cfg_node **out, ttt_error *err) {
    const ttt_cfg_node *g = ttt_cfg_get(given, key), *checked = ttt_cfg_get(root, key);
    char buf[32];
    *out = NULL;
    if (strcmp(key, "task") == 0) {
        /* the keys the section gave, in their order, as checked */
        ttt_cfg_node *sec = ttt_cfg_new_map(checked);
        for (int i = 0; sec && g && g->kind == TTT_CFG_MAP && i < g->n; i++)
            ttt_cfg_map_set(sec, g->keys[i], ttt_cfg_clone(ttt_cfg_get(checked, g->keys[i])));
        ttt_status s = sec ? pt->task->section(pt->cfg, sec, out, err) : TTT_OK;
        ttt_cfg_free(sec);
        return s;
    }
    const ttt_cfg_node *rendered = ttt_cfg_get(sections, key);
    if (rendered)
        *out = ttt_cfg_clone(rendered);
    else if (strcmp(key, "output") == 0 && !(checked && checked->scalar && checked->scalar[0]))
        *out = ttt_cfg_new_scalar(pt->output, root);
    else if (g)
        *out = ttt_cfg_clone(checked);
    else if (strcmp(key, "name") == 0)
        *out = ttt_cfg_new_scalar(pt->name, root);
    else if (strcmp(key, "description") == 0)
        *out = ttt_cfg_new_scalar(top->description[0] ? top->description : NULL, root);
    else if (strcmp(key, "seed") == 0) {
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)pt->seed);
        *out = ttt_cfg_new_scalar(buf, root);
    } else if (strcmp(key, "seeds") == 0) {
        snprintf(buf, sizeof buf, "%ld", top->seeds);
        *out = ttt_cfg_new_scalar(buf, root);
    } else /* a mapping section nobody read and the point left out: nothing asked of it */
        *out = ttt_cfg_new_map(root);
    return TTT_OK;
}

/* A point's configuration as config.resolved.yaml shows it, written from what read_point read:
 * the top-level keys in the order the point gave them, then those it left out in the order of
 * ttt_experiment_options (the name first). A value the point left out is written from the value
 * its reader holds, never taken from the defaults the checks filled into the checked copy. */
static ttt_status write_point(const ttt_plan_point *pt, const plan_top *top,
                              const ttt_cfg_node *given, const ttt_cfg_node *root,
                              const ttt_cfg_node *sections, ttt_cfg_node **out, ttt_error *err) {
    const unsigned long oom_mark = ttt_cfg_alloc_failures();
    ttt_cfg_node *r = ttt_cfg_new_map(root);
    ttt_status s = TTT_OK;
    for (int i = 0; r && s == TTT_OK && i < given->n; i++) {
        ttt_cfg_node *v = NULL;
        if (strcmp(given->keys[i], "resolved") == 0) continue;
        s = top_value(pt, top, given->keys[i], given, root, sections, &v, err);
        if (s == TTT_OK) ttt_cfg_map_set(r, given->keys[i], v);
    }
    for (const ttt_option *o = ttt_experiment_options; r && s == TTT_OK && o->name; o++) {
        ttt_cfg_node *v = NULL;
        if (ttt_cfg_get(given, o->name)) continue;
        s = top_value(pt, top, o->name, given, root, sections, &v, err);
        if (s == TTT_OK) ttt_cfg_map_set(r, o->name, v);
    }
    if (s == TTT_OK && (!r || ttt_cfg_alloc_failures() != oom_mark))
        s = ttt_cfg_out_of_memory(err, "the resolved configuration");
    if (s != TTT_OK) {
        ttt_cfg_free(r);
        return s;
    }
    *out = r;
    return TTT_OK;
}

/* One point of the plan: `given` (the sweep's point) is only read; read_point checks a copy of
 * it, and *resolved, the point's configuration for config.resolved.yaml, is written from what
 * was read (write_point). */
static ttt_status plan_point(ttt_plan_point *pt, const ttt_cfg_node *given, const char *stem,
                             ttt_cfg_node **resolved, ttt_error *err) {
    ttt_cfg_node *root = ttt_cfg_clone(given), *sections = ttt_cfg_new_map(given);
    plan_top top = {0};
    ttt_status s = root && sections ? TTT_OK : ttt_cfg_out_of_memory(err, "the plan");
    if (s == TTT_OK) s = read_point(pt, root, stem, sections, &top, err);
    if (s == TTT_OK) s = write_point(pt, &top, given, root, sections, resolved, err);
    if (s == TTT_OK) ttt_plan_config_hash(*resolved, pt->config_hash);
    ttt_cfg_free(root);
    ttt_cfg_free(sections);
    return s;
}

/* config.resolved.yaml: without a sweep, the one point with every default; with a sweep, the
 * experiment as given plus `resolved:`, one fully resolved configuration per point. */
static char *resolved_text(const ttt_cfg_node *doc, ttt_cfg_node *const *trees,
                           char *const *labels, int n) {
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f) return NULL;
    int failed = 0;
    if (!ttt_cfg_get(doc, "sweep") && n == 1) {
        failed = ttt_cfg_write_yaml(trees[0], f) != 0;
    } else {
        const unsigned long oom_mark = ttt_cfg_alloc_failures();
        ttt_cfg_node *d = ttt_cfg_clone(doc);
        ttt_cfg_node *list = ttt_cfg_new_seq(d);
        for (int i = 0; i < n; i++) {
            ttt_cfg_node *item = ttt_cfg_new_map(d);
            ttt_cfg_map_set(item, "point", ttt_cfg_new_scalar(labels[i], d));
            ttt_cfg_map_set(item, "config", ttt_cfg_clone(trees[i]));
            ttt_cfg_seq_push(list, item);
        }
        ttt_cfg_map_set(d, "resolved", list);
        fprintf(f, "# The experiment as run. `resolved` lists every sweep point with all its "
                   "values;\n# it is informational and ignored when this file is run again.\n");
        failed = ttt_cfg_write_yaml(d, f) != 0 || ttt_cfg_alloc_failures() != oom_mark;
        ttt_cfg_free(d);
    }
    if (fclose(f) != 0 || failed) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* The pass over doc, the plan's copy of the experiment without its `resolved:` list. */
static ttt_status plan_build(const ttt_cfg_node *doc, const char *stem, ttt_plan **out,
                             ttt_error *err) {
    ttt_cfg_node **trees = NULL;
    char **labels = NULL;
    int n = 0;
    TTT_TRY(ttt_cfg_sweep_expand(doc, &trees, &labels, &n, err));
    const int seeds = ttt_plan_doc_seeds(doc);
    ttt_status rs = ttt_plan_replicate(&trees, &labels, &n, seeds, err);
    if (rs != TTT_OK) {
        ttt_cfg_points_free(trees, labels, n);
        return rs;
    }
    ttt_plan *p = ttt_fault_calloc(1, sizeof *p);
    /* the points' resolved configurations (plan_point) */
    ttt_cfg_node **res = ttt_fault_calloc((size_t)(n > 0 ? n : 1), sizeof *res);
    ttt_status s = TTT_OK;
    if (!p || !res ||
        !(p->points = ttt_fault_calloc((size_t)(n > 0 ? n : 1), sizeof *p->points))) {
        s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
    } else {
        p->n_points = n;
        for (int i = 0; i < n; i++) p->points[i].index = i;
    }
    for (int i = 0; s == TTT_OK && i < n; i++) {
        ttt_plan_point *pt = &p->points[i];
        if (!(pt->label = ttt_fault_strdup(labels[i]))) {
            s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
            break;
        }
        const unsigned long oom_mark = ttt_cfg_alloc_failures();
        s = plan_point(pt, trees[i], stem, &res[i], err);
        /* a value the configuration code could not store (a default, a preset's key) makes
         * the point fail as out of memory, whatever the checks said after it */
        if (ttt_cfg_alloc_failures() != oom_mark)
            s = ttt_cfg_out_of_memory(err, "the plan of the experiment");
        if (s != TTT_OK && labels[i][0]) {
            ttt_plan_error_suffix_point(err, labels[i]);
            error_hint_axes(err, ttt_cfg_get(doc, "sweep"));
        }
    }
    if (s == TTT_OK) {
        p->seeds = seeds;
        s = ttt_plan_read_charts(doc, p, err);
    }
    if (s == TTT_OK) s = ttt_plan_columns(p, ttt_cfg_get(doc, "sweep"), res, err);
    if (s == TTT_OK) s = ttt_plan_read_results(doc, p, err);
    if (s == TTT_OK && !(p->resolved_yaml = resolved_text(doc, res, labels, n)))
        s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the resolved configuration");
    /* Below this line nothing sees a tree: the points' trees go now. */
    for (int i = 0; res && i < n; i++) ttt_cfg_free(res[i]);
    free(res);
    ttt_cfg_points_free(trees, labels, n);
    if (s != TTT_OK) {
        ttt_plan_free(p);
        return s;
    }
    *out = p;
    return TTT_OK;
}

ttt_status ttt_plan_build(const ttt_cfg_node *given, const char *stem, ttt_plan **out,
                          ttt_error *err) {
    *out = NULL;
    ttt_cfg_oom_clear();
    ttt_cfg_node *doc = ttt_cfg_clone(given);
    if (!doc) return ttt_cfg_out_of_memory(err, "the experiment");
    ttt_cfg_map_remove(doc, "resolved");
    const ttt_status s = plan_build(doc, stem, out, err);
    ttt_cfg_free(doc);
    return s;
}

void ttt_plan_free(ttt_plan *p) {
    if (!p) return;
    for (int i = 0; p->points && i < p->n_points; i++) {
        ttt_plan_point *pt = &p->points[i];
        if (pt->cfg && pt->task && pt->task->cfg_free) pt->task->cfg_free(pt->cfg);
        free(pt->cfg);
        free(pt->label);
        free(pt->series);
        for (int c = 0; pt->values && c < p->n_cols; c++) free(pt->values[c]);
        free(pt->values);
        free(pt->name);
        free(pt->output);
    }
    free(p->points);
    for (int c = 0; c < p->n_cols; c++) free(p->cols[c]);
    free(p->cols);
    free(p->log_y_only);
    free(p->best_over);
    free(p->best_metric);
    free(p->resolved_yaml);
    free(p);
}

const char *ttt_plan_output(const ttt_plan *p, const char *out_dir) {
    return out_dir ? out_dir : p->points[0].output;
}
/* config.resolved.yaml goes first, so a run folder always says what produced it. */
ttt_status ttt_plan_write_resolved(const ttt_plan *p, const char *dir, ttt_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.resolved.yaml", dir);
    return ttt_write_file_atomic(path, p->resolved_yaml, err);
}
