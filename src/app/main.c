/* ttt: the command-line program. The only place that exits. */
#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blas.h"
#include "seqmodel.h"
#include "mixer.h"
#include "fault.h"
#include "train.h"
#include "apply.h"
#include "comm.h"
#include "compare.h"
#include "experiment.h"
#include "export.h"
#include "plan.h"
#include "provenance.h"
#include "layer.h"
#include "task.h"
#include "trained.h"

enum { EXIT_RUN_FAILED = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

/* First SIGINT/SIGTERM/SIGHUP: ask every running loop to stop (training checkpoints after the
 * current step; other tasks stop after the current measurement) and write what is finished.
 * A second one of any of them ends the program at once: the default actions are restored
 * (docs/hardening.md "Signals"). */
static void on_stop_signal(int sig) {
    (void)sig;
    ttt_train_request_stop();
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
}

static void install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static const char usage_text[] =
    "usage: ttt <command> [options]\n"
    "\n"
    "commands:\n"
    "  run FILE [--set KEY=VALUE]... [--out DIR] [--quiet] [--shard I/N]\n"
    "      [--parallel auto|points|data]\n"
    "                 run the experiment in FILE and write its run folder; under mpirun or\n"
    "                 srun the ranks share the work (docs/scaling.md)\n"
    "  merge FILE [--set KEY=VALUE]... [--out DIR]\n"
    "                 write the run folder from the points that `run --shard` jobs ran\n"
    "  check FILE [--set KEY=VALUE]... [--brief]\n"
    "                 validate FILE and print the resolved configuration (every default);\n"
    "                 --brief: one line per run point instead\n"
    "  apply FILE IN.safetensors OUT.safetensors [--set KEY=VALUE]... [--threads N]\n"
    "                 run FILE's `layer:` on tensors from another tool (q, k, v, beta,\n"
    "                 log_alpha, initial_state; layout (B, T, H, D)) and write o, final_state\n"
    "  sample RUN_DIR [--point I] [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]\n"
    "      [--seed S]   continue a prompt with a trained lm point's model (its last\n"
    "                 checkpoint); temperature 0 = greedy\n"
    "  export RUN_DIR OUT.safetensors [--point I]\n"
    "                 a trained point's weights in PyTorch's names and (out, in) layouts\n"
    "                 (train.init_from reads them back)\n"
    "  logits RUN_DIR IN.safetensors OUT.safetensors [--point I]\n"
    "                 a trained point's logits (B, T, V) on the token ids 'tokens' (B, T) of\n"
    "                 IN: the reference for a loader of the export\n"
    "  compare RUN_DIR... [--out DIR]\n"
    "                 the summaries of several run folders (of one task kind) side by side,\n"
    "                 aligned on their swept columns; --out DIR also writes the merged\n"
    "                 summary.csv, metrics.jsonl and a page with the runs' charts overlaid\n"
    "  list           every registered optimizer, model, loss, preset and task with options\n"
    "  --help, -h     this text\n"
    "  --version      the version\n"
    "\n"
    "options:\n"
    "  --set KEY=VALUE  override any key by its dotted path, e.g. --set layer.mini_batch=16 or\n"
    "                   --set task.pairs=[8,16]; setting a swept key pins it\n"
    "  --out DIR        write the run folder here instead of the file's `output`\n"
    "  --quiet          no progress on stderr\n"
    "  --shard I/N      run only shard I (0 … N−1) of the sweep's points, balanced by cost, for\n"
    "                   job arrays without MPI; then `ttt merge` writes the run folder\n"
    "  --parallel P     under MPI: points (each point whole on one rank), data (every rank\n"
    "                   trains each point: the batch's shards split over ranks), auto (points\n"
    "                   when there are at least as many points as ranks; the default)\n"
    "  --threads N      apply: threads over (batch, head); 0 = every core (default)\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "ttt: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see ttt --help)\n");
    return EXIT_USAGE;
}

static int exit_code_for(ttt_status s) {
    switch (s) {
    case TTT_ERR_YAML: case TTT_ERR_CONFIG: case TTT_ERR_RANGE: case TTT_ERR_NAME:
    case TTT_ERR_ARG:
        return EXIT_USAGE;
    case TTT_ERR_INTERRUPTED:
        return EXIT_INTERRUPTED;
    default:
        return EXIT_RUN_FAILED;
    }
}

static int report(const ttt_error *err) {
    fprintf(stderr, "ttt: %s%s\n", err->status == TTT_ERR_INTERRUPTED ? "" : "error: ",
            err->msg[0] ? err->msg : ttt_status_message(err->status));
    return exit_code_for(err->status);
}

typedef struct cli_args {
    const char *file;
    const char *out;
    int quiet;
    int brief; /* check: one line per point instead of the resolved configuration */
    int shard, n_shards;
    ttt_plan_parallel parallel;
    int n_sets;
    const char **sets;
} cli_args;

/* Parse FILE and options after the command. Returns 0 or an exit code. */
static int parse_args(int argc, char **argv, int allow_out, cli_args *a) {
    memset(a, 0, sizeof *a);
    a->sets = ttt_fault_calloc((size_t)argc + 1, sizeof *a->sets);
    if (!a->sets) {
        fprintf(stderr, "ttt: error: out of memory for the command line\n");
        return EXIT_RUN_FAILED;
    }
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--set") == 0) {
            if (i + 1 >= argc) return usage_error("--set needs KEY=VALUE%s", "");
            a->sets[a->n_sets++] = argv[++i];
        } else if (strncmp(s, "--set=", 6) == 0) {
            a->sets[a->n_sets++] = s + 6;
        } else if (allow_out && strcmp(s, "--out") == 0) {
            if (i + 1 >= argc) return usage_error("--out needs a folder%s", "");
            a->out = argv[++i];
        } else if (allow_out && strncmp(s, "--out=", 6) == 0) {
            a->out = s + 6;
        } else if (allow_out && strcmp(s, "--quiet") == 0) {
            a->quiet = 1;
        } else if (!allow_out && strcmp(s, "--brief") == 0) {
            a->brief = 1;
        } else if (allow_out == 1 && strcmp(s, "--shard") == 0) {
            int c = 0;
            if (i + 1 >= argc || sscanf(argv[i + 1], "%d/%d%n", &a->shard, &a->n_shards, &c) != 2 ||
                argv[i + 1][c] || a->n_shards < 1 || a->shard < 0 || a->shard >= a->n_shards)
                return usage_error("--shard needs I/N with 0 <= I < N, e.g. --shard 0/4%s", "");
            i++;
        } else if (allow_out == 1 && strcmp(s, "--parallel") == 0) {
            const char *v = i + 1 < argc ? argv[++i] : "";
            if (strcmp(v, "auto") == 0) a->parallel = TTT_PARALLEL_AUTO;
            else if (strcmp(v, "points") == 0) a->parallel = TTT_PARALLEL_POINTS;
            else if (strcmp(v, "data") == 0) a->parallel = TTT_PARALLEL_DATA;
            else return usage_error("--parallel needs auto, points or data, not '%s'", v);
        } else if (s[0] == '-' && s[1]) {
            return usage_error("unknown option '%s'", s);
        } else if (!a->file) {
            a->file = s;
        } else {
            return usage_error("unexpected argument '%s' (one experiment file at a time)", s);
        }
    }
    if (!a->file) return usage_error("missing the experiment FILE%s", "");
    return 0;
}

/* Parse the arguments and load, override and validate the experiment; 0 or an exit code. */
static int load_experiment(int argc, char **argv, int allow_out, cli_args *a,
                           ttt_experiment **e) {
    int rc = parse_args(argc, argv, allow_out, a);
    if (rc) {
        free(a->sets);
        return rc;
    }
    ttt_error err = {0};
    ttt_status s = ttt_experiment_load(a->file, a->sets, a->n_sets, e, &err);
    free(a->sets);
    return s == TTT_OK ? 0 : report(&err);
}

/* What form each layer call of a point runs and why (docs/forms.md "How `auto` chooses"): on
 * stderr, so that stdout stays the resolved configuration. */
static void print_one_form(int point, const char *what, const ttt_layer *L,
                           const ttt_form_inputs *in) {
    ttt_form_plan plan;
    ttt_error err = {0};
    char buf[1100];
    if (!ttt_form_plan_with(NULL, L, in, &plan, &err))
        snprintf(buf, sizeof buf, "none: %s", err.msg);
    else
        ttt_form_plan_describe(&plan, buf, sizeof buf);
    const int is_auto = !L->form || strcmp(L->form, "auto") == 0;
    fprintf(stderr, "point %d, %s, d_k %d, d_v %d, T %ld, %s: %s%s\n", point, what, L->d_k,
            L->d_v, in->T,
            in->gate == TTT_FORM_GATE_KEY     ? "gate (T, d_k)"
            : in->gate == TTT_FORM_GATE_TOKEN ? "gate (T)"
                                              : "no gate",
            is_auto ? "auto: " : "form: ", buf);
}

static void print_forms(const ttt_plan *p) {
    for (int i = 0; i < p->n_points; i++) {
        const ttt_plan_point *pt = &p->points[i];
        enum { MAX_CALLS = 64 };
        const ttt_layer *L[MAX_CALLS];
        ttt_form_inputs in[MAX_CALLS];
        if (pt->task->layer_calls) {
            const int n = pt->task->layer_calls(pt->cfg, L, in, MAX_CALLS);
            for (int j = 0; j < n; j++) print_one_form(pt->index, "forward", L[j], &in[j]);
        } else if (pt->task->model) {
            const ttt_seq_model_config *mc = pt->task->model(pt->cfg);
            if (!mc || !ttt_mixer_at(mc->mixer)->uses_layer) continue;
            ttt_form_inputs fi = ttt_form_inputs_plain(&mc->layer, mc->io.seq_len, 1);
            fi.eta = mc->eta != TTT_ETA_NONE;
            fi.gate = mc->gate == TTT_GATE_VECTOR ? TTT_FORM_GATE_KEY
                      : mc->gate == TTT_GATE_NONE ? fi.gate
                                                  : TTT_FORM_GATE_TOKEN;
            print_one_form(pt->index, "training (tape)", &mc->layer, &fi);
            fi.tape = 0;
            print_one_form(pt->index, "evaluation", &mc->layer, &fi);
        }
    }
}

/* Where each trained point's step runs, in what precision, and the memory a step holds there
 * (trained.h; docs/training.md "Device and precision"): on stderr, as the forms above. */
static void print_devices(const ttt_plan *p) {
    for (int i = 0; i < p->n_points; i++) {
        const ttt_plan_point *pt = &p->points[i];
        const ttt_trained_cfg *tc = pt->task->trained ? pt->task->trained(pt->cfg) : NULL;
        if (!tc) continue;
        const ttt_train_estimate *m = &tc->memory;
        const int host = ttt_device_is_host(tc->train.device);
        char dev[160], total[32], params[32], step[32], other[32];
        double step_b = m->step, total_b = m->total;
        if (host) {
            snprintf(dev, sizeof dev, "cpu");
        } else if (tc->train.n_devices > 0) {
            /* train.devices (docs/scaling.md "Several GPUs"): each rank holds the model and
             * the step of its rows, at most ⌈B/W⌉ of a batch of B */
            const int W = tc->train.n_devices, B = tc->train.batch;
            char d0[32];
            snprintf(dev, sizeof dev, "%s over %d rank%s (train.devices), per rank",
                     ttt_device_name(tc->train.devices[0], d0, sizeof d0), W, W > 1 ? "s" : "");
            step_b = m->step * (double)((B + W - 1) / W) / (double)B;
            total_b = m->total - m->step + step_b;
        } else {
            ttt_device_name(tc->train.device, dev, sizeof dev);
        }
        ttt_device_bytes_text((size_t)total_b, total, sizeof total);
        ttt_device_bytes_text((size_t)m->params, params, sizeof params);
        ttt_device_bytes_text((size_t)step_b, step, sizeof step);
        ttt_device_bytes_text((size_t)m->other, other, sizeof other);
        if (host)
            fprintf(stderr,
                    "point %d, train.device cpu, train.dtype %s: host memory of a training "
                    "step %s (estimated: parameters, gradients and AdamW state %s, activations "
                    "and tape %s, arena blocks and shard gradients %s)\n",
                    pt->index, ttt_dtype_name(tc->train.dtype), total, params, step, other);
        else if (tc->train.dtype == TTT_DTYPE_BF16) /* docs/gpu.md "bfloat16 training" */
            fprintf(stderr,
                    "point %d, train.device %s, train.dtype %s: device memory of a training "
                    "step %s (estimated: parameters, their bf16 copy, gradients and AdamW state "
                    "%s, activations and tape in float32 %s, bf16 operands of a product %s)\n",
                    pt->index, dev, ttt_dtype_name(tc->train.dtype), total, params, step, other);
        else
            fprintf(stderr,
                    "point %d, train.device %s, train.dtype %s: device memory of a training "
                    "step %s (estimated: parameters, gradients and AdamW state %s, activations "
                    "and tape %s)\n",
                    pt->index, dev, ttt_dtype_name(tc->train.dtype), total, params, step);
    }
}

static int cmd_check(int argc, char **argv) {
    cli_args a;
    ttt_experiment *e = NULL;
    int rc = load_experiment(argc, argv, 0, &a, &e);
    if (rc) return rc;
    /* what `ttt run` would refuse of the points' devices is refused here as well (a mixer
     * without a device path on train.device: cuda), before anything is printed */
    ttt_error derr = {0};
    if (ttt_plan_devices_ready(e->plan, &derr) != TTT_OK) {
        ttt_experiment_free(e);
        return report(&derr);
    }
    if (a.brief) {
        /* one line per point: what runs where, without the hundreds of lines of defaults */
        const ttt_plan *p = e->plan;
        int w = 5;
        for (int i = 0; i < p->n_points; i++)
            if ((int)strlen(p->points[i].label) > w) w = (int)strlen(p->points[i].label);
        printf("%5s  %-10s  %-*s  %10s  %-16s  %s\n", "point", "task", w, "sweep", "cost",
               "config hash", "seed");
        for (int i = 0; i < p->n_points; i++) {
            const ttt_plan_point *pt = &p->points[i];
            printf("%5d  %-10s  %-*s  %10.3g  %-16s  %llu\n", pt->index, pt->task->name, w,
                   pt->label[0] ? pt->label : "-", pt->cost, pt->config_hash,
                   (unsigned long long)pt->seed);
        }
        printf("run folder: %s\n", ttt_experiment_output(e, NULL));
    } else {
        ttt_experiment_write_resolved(e, stdout);
    }
    print_forms(e->plan);
    print_devices(e->plan);
    fprintf(stderr, "ttt: %s is valid: %d run point%s\n", a.file, e->n_points,
            e->n_points == 1 ? "" : "s");
    ttt_experiment_free(e);
    return 0;
}

/* The experiment a run folder holds (its config.resolved.yaml), with `point` checked; 0 or an
 * exit code. */
static int load_run_point(const char *run_dir, long point, ttt_experiment **e) {
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.resolved.yaml", run_dir);
    ttt_error err = {0};
    if (ttt_experiment_load(cfg, NULL, 0, e, &err) != TTT_OK) return report(&err);
    if (point >= (*e)->n_points) {
        ttt_experiment_free(*e);
        *e = NULL;
        char msg[64];
        snprintf(msg, sizeof msg, "%ld", point);
        return usage_error("--point %s: the run has fewer points (see `ttt check --brief` of "
                           "its config.resolved.yaml)", msg);
    }
    return 0;
}

/* The arguments of `export` and `logits`: `npos` positionals (their names in `want`, for the
 * usage message) and an optional --point I. 0, or the usage error's exit code. */
static int point_args(const char *cmd, const char *want, int argc, char **argv, const char **pos,
                      int npos, long *point) {
    int np = 0;
    char msg[256];
    *point = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--point") == 0 && i + 1 < argc) {
            char *end;
            *point = strtol(argv[++i], &end, 10);
            if (*end || *point < 0)
                return usage_error("--point needs a point index >= 0, not '%s'", argv[i]);
        } else if (argv[i][0] == '-' && argv[i][1]) {
            snprintf(msg, sizeof msg, "%s: unknown option or missing value '%s'", cmd, argv[i]);
            return usage_error("%s", msg);
        } else if (np < npos) {
            pos[np++] = argv[i];
        } else {
            snprintf(msg, sizeof msg, "%s: unexpected argument '%s'", cmd, argv[i]);
            return usage_error("%s", msg);
        }
    }
    snprintf(msg, sizeof msg, "%s needs %s", cmd, want);
    return np == npos ? 0 : usage_error("%s", msg);
}

/* The trained model of point `point` of the run folder `run` (e: its experiment, loaded);
 * `which` names the tasks that have one, for the refusal. */
static ttt_status point_model(ttt_seq_model *m, const char *cmd, const char *which,
                              const char *run, long point, const ttt_experiment *e,
                              ttt_error *err) {
    const ttt_plan_point *pt = &e->plan->points[point];
    if (!pt->task->model)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "%s: point %ld of %s is a %s task, which trains no model (%s do)",
                             cmd, point, run, pt->task->name, which);
    return ttt_trained_load(m, pt->task->model(pt->cfg), run, (int)point, err);
}

/* ttt export RUN_DIR OUT.safetensors [--point I]: a trained point's weights in PyTorch's names
 * and layouts (docs/training.md "Exporting to PyTorch"). */
static int cmd_export(int argc, char **argv) {
    const char *pos[2] = {0};
    long point;
    int rc = point_args("export", "RUN_DIR OUT.safetensors", argc, argv, pos, 2, &point);
    if (rc) return rc;
    ttt_error err = {0};
    /* never into a run folder (its checkpoint among others: docs/hardening.md "What a command
     * may overwrite") */
    if (ttt_output_file_check("export", pos[1], NULL, 0, &err) != TTT_OK) return report(&err);
    ttt_experiment *e = NULL;
    if ((rc = load_run_point(pos[0], point, &e))) return rc;
    ttt_seq_model m;
    ttt_status s = point_model(&m, "export", "mqar, regression and lm", pos[0], point, e, &err);
    if (s == TTT_OK) {
        s = ttt_export_write(pos[1], &m, e->plan->resolved_yaml, (int)point, &err);
        ttt_seq_model_free(&m);
    }
    ttt_experiment_free(e);
    if (s != TTT_OK) return report(&err);
    fprintf(stderr, "ttt: wrote %s (point %ld of %s)\n", pos[1], point, pos[0]);
    return 0;
}

/* ttt logits RUN_DIR IN.safetensors OUT.safetensors [--point I]: a trained point's forward pass
 * on a batch of token ids, what a loader of `ttt export` must reproduce (docs/training.md
 * "Exporting to PyTorch"). */
static int cmd_logits(int argc, char **argv) {
    const char *pos[3] = {0};
    long point;
    int rc = point_args("logits", "RUN_DIR IN.safetensors OUT.safetensors", argc, argv, pos, 3,
                        &point);
    if (rc) return rc;
    ttt_error err = {0};
    if (ttt_output_file_check("logits", pos[2], &pos[1], 1, &err) != TTT_OK) return report(&err);
    ttt_experiment *e = NULL;
    if ((rc = load_run_point(pos[0], point, &e))) return rc;
    ttt_seq_model m;
    ttt_status s = point_model(&m, "logits", "mqar and lm", pos[0], point, e, &err);
    if (s == TTT_OK) {
        s = ttt_export_logits(pos[2], &m, pos[1], &err);
        ttt_seq_model_free(&m);
    }
    ttt_experiment_free(e);
    return s == TTT_OK ? 0 : report(&err);
}

/* ttt sample RUN_DIR: continue a prompt with a trained point's model, from the run folder's
 * resolved configuration and the point's last checkpoint (docs/training.md "Sampling"). */
static int cmd_sample(int argc, char **argv) {
    const char *run_dir = NULL, *prompt = "";
    long point = 0, n_tokens = 200, top_k = 0;
    double temperature = 1.0;
    unsigned long long seed = 0;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(o, "--prompt") == 0 && v) {
            prompt = v;
        } else if (strcmp(o, "--point") == 0 && v) {
            point = strtol(v, &end, 10);
            if (*end || point < 0) return usage_error("--point needs a point index >= 0, not '%s'", v);
        } else if (strcmp(o, "--tokens") == 0 && v) {
            n_tokens = strtol(v, &end, 10);
            if (*end || n_tokens < 1 || n_tokens > 1000000)
                return usage_error("--tokens needs a number from 1 to 1000000, not '%s'", v);
        } else if (strcmp(o, "--temperature") == 0 && v) {
            temperature = strtod(v, &end);
            if (*end || !(temperature >= 0 && temperature <= 100))
                return usage_error("--temperature needs a number from 0 (greedy) to 100, not '%s'", v);
        } else if (strcmp(o, "--top-k") == 0 && v) {
            top_k = strtol(v, &end, 10);
            if (*end || top_k < 0 || top_k > (1L << 30))
                return usage_error("--top-k needs a number >= 0 (0 = every token), not '%s'", v);
        } else if (strcmp(o, "--seed") == 0 && v) {
            /* the range of `seed:` in an experiment file (src/app/experiment.c), with its
             * message: strtoull alone would take "-1" as 2^64 − 1 and wrap past 2^64 */
            errno = 0;
            seed = v[0] >= '0' && v[0] <= '9' ? strtoull(v, &end, 10) : 0;
            if (v[0] == '-' && v[1] >= '0' && v[1] <= '9')
                return usage_error("--seed: %s is out of range; expected an integer from 0 to "
                                   "9007199254740992", v);
            if (!end || end == v || *end)
                return usage_error("--seed: expected an integer from 0 to 9007199254740992, "
                                   "not '%s'", v);
            if (errno == ERANGE || seed > 9007199254740992ULL)
                return usage_error("--seed: %s is out of range; expected an integer from 0 to "
                                   "9007199254740992", v);
        } else if (o[0] == '-' && o[1]) {
            return usage_error("sample: unknown option or missing value '%s'", o);
        } else if (!run_dir) {
            run_dir = o;
            continue;
        } else {
            return usage_error("sample: unexpected argument '%s' (one run folder)", o);
        }
        i++;
    }
    if (!run_dir) return usage_error("sample needs a RUN_DIR (a run folder of a trained task)%s", "");
    ttt_experiment *e = NULL;
    int rc = load_run_point(run_dir, point, &e);
    if (rc) return rc;
    ttt_error err = {0};
    ttt_status s = TTT_OK;
    const ttt_plan_point *pt = &e->plan->points[point];
    if (!pt->task->sample) {
        s = ttt_error_set(&err, TTT_ERR_ARG,
                          "sample: point %ld of %s is a %s task, which has no model to sample "
                          "from (lm has)",
                          point, run_dir, pt->task->name);
    } else {
        const ttt_task_sample q = {.cfg = pt->cfg, .run_dir = run_dir, .point = (int)point,
                                   .prompt = prompt, .n_tokens = (int)n_tokens,
                                   .temperature = temperature, .top_k = (int)top_k,
                                   .seed = seed, .out = stdout};
        s = pt->task->sample(&q, &err);
    }
    ttt_experiment_free(e);
    return s == TTT_OK ? 0 : report(&err);
}

/* The ranks of the job (or this process alone); every rank reads the same files and options,
 * so each builds the same plan. Only rank 0 prints the table and the final line. */
static int cmd_run(int argc, char **argv, const ttt_comm *comm) {
    cli_args a;
    ttt_experiment *e = NULL;
    int rc = load_experiment(argc, argv, 1, &a, &e);
    if (rc) return rc;
    if (a.n_shards > 0 && comm->size > 1) {
        ttt_experiment_free(e);
        return usage_error("--shard is for jobs started without MPI; under mpirun the ranks "
                           "share the points themselves%s", "");
    }
    /* srun without an MPI plugin starts N copies that do not know of each other: each would run
     * the whole experiment into the same folder */
    const char *tasks = getenv("SLURM_STEP_NUM_TASKS");
    if (comm->size == 1 && a.n_shards == 0 && tasks && atoi(tasks) > 1) {
        ttt_experiment_free(e);
        fprintf(stderr, "ttt: started by srun as one of %s tasks, but not as an MPI rank: use "
                        "`srun --mpi=pmix ttt run ...` (a build with MPI), or give each task its "
                        "shard: `ttt run ... --shard $SLURM_PROCID/$SLURM_NTASKS` "
                        "(docs/scaling.md)\n", tasks);
        return EXIT_USAGE;
    }
    install_stop_handlers();
    ttt_error err = {0};
    ttt_plan_exec x = {.comm = comm, .parallel = a.parallel, .shard = a.shard,
                       .n_shards = a.n_shards};
    const int leader = comm->rank == 0;
    ttt_status s = ttt_plan_run_exec(e->plan, a.out, !a.quiet, leader ? stdout : NULL, &x, &err);
    if (s == TTT_OK && a.n_shards > 0)
        fprintf(stderr, "ttt: shard %d/%d done; when every shard is, `ttt merge %s` (with the "
                        "same --set/--out) writes %s/\n",
                a.shard, a.n_shards, a.file, ttt_experiment_output(e, a.out));
    else if (s == TTT_OK && leader)
        fprintf(stderr, "ttt: results in %s/ (open index.html)\n", ttt_experiment_output(e, a.out));
    ttt_experiment_free(e);
    if (s != TTT_OK && comm->size > 1) fprintf(stderr, "ttt: rank %d of %d:\n", comm->rank, comm->size);
    return s == TTT_OK ? 0 : report(&err);
}

static int cmd_merge(int argc, char **argv) {
    cli_args a;
    ttt_experiment *e = NULL;
    int rc = load_experiment(argc, argv, 2, &a, &e);
    if (rc) return rc;
    ttt_error err = {0};
    ttt_status s = ttt_plan_merge(e->plan, a.out, stdout, &err);
    if (s == TTT_OK)
        fprintf(stderr, "ttt: results in %s/ (open index.html)\n", ttt_experiment_output(e, a.out));
    ttt_experiment_free(e);
    return s == TTT_OK ? 0 : report(&err);
}

/* `ttt compare RUN_DIR... [--out DIR]` (docs/results.md "Comparing runs"). */
static int cmd_compare(int argc, char **argv) {
    const char **dirs = calloc((size_t)argc + 1, sizeof *dirs);
    if (!dirs) {
        fprintf(stderr, "ttt: error: out of memory\n");
        return EXIT_RUN_FAILED;
    }
    const char *out = NULL;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0) {
            if (i + 1 >= argc) {
                free(dirs);
                return usage_error("--out needs a folder%s", "");
            }
            out = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            free(dirs);
            return usage_error("compare: unknown option '%s' (expected run folders and --out DIR)",
                               argv[i]);
        } else {
            dirs[n++] = argv[i];
        }
    }
    if (n < 1) {
        free(dirs);
        return usage_error("compare needs run folders: ttt compare runs/a runs/b [--out DIR]%s",
                           "");
    }
    ttt_error err = {0};
    ttt_status s = ttt_compare(dirs, n, out, stdout, &err);
    free(dirs);
    if (s == TTT_OK && out) fprintf(stderr, "ttt: comparison in %s/ (open index.html)\n", out);
    return s == TTT_OK ? 0 : report(&err);
}

static int cmd_apply(int argc, char **argv) {
    const char *pos[3] = {0};
    int np = 0;
    const char **sets = ttt_fault_calloc((size_t)argc + 1, sizeof *sets);
    if (!sets) {
        fprintf(stderr, "ttt: error: out of memory for the command line\n");
        return EXIT_RUN_FAILED;
    }
    int n_sets = 0, rc = 0, threads = 0;
    for (int i = 0; i < argc && !rc; i++) {
        if (strcmp(argv[i], "--threads") == 0) {
            char *end = NULL;
            long t = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
            if (i + 1 >= argc || !end || *end || t < 0 || t > TTT_APPLY_MAX_THREADS)
                rc = usage_error("--threads needs a number of threads from 0 (all cores) to "
                                 "256%s", "");
            threads = (int)t;
            i++;
        } else if (strcmp(argv[i], "--set") == 0) {
            if (i + 1 >= argc) rc = usage_error("--set needs KEY=VALUE%s", "");
            else sets[n_sets++] = argv[++i];
        } else if (strncmp(argv[i], "--set=", 6) == 0) {
            sets[n_sets++] = argv[i] + 6;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            rc = usage_error("unknown option '%s'", argv[i]);
        } else if (np < 3) {
            pos[np++] = argv[i];
        } else {
            rc = usage_error("unexpected argument '%s'", argv[i]);
        }
    }
    if (!rc && np != 3) rc = usage_error("apply needs FILE IN.safetensors OUT.safetensors%s", "");
    if (rc) {
        free(sets);
        return rc;
    }
    ttt_error err = {0};
    ttt_cfg_node *root = NULL;
    ttt_cfg_oom_clear();
    ttt_status s = ttt_cfg_load_file(pos[0], &root, &err);
    for (int i = 0; s == TTT_OK && i < n_sets; i++) s = ttt_cfg_apply_set(root, sets[i], &err);
    free(sets);
    /* The layer file describes one layer: a sweep there would be dropped without a word. */
    const ttt_cfg_node *sweep = s == TTT_OK ? ttt_cfg_get(root, "sweep") : NULL;
    if (sweep)
        s = ttt_cfg_error(&err, TTT_ERR_CONFIG, sweep,
                          "'sweep' has no meaning for ttt apply, which runs one layer; expected "
                          "a file with one 'layer:' (use --set to change a value)");
    /* Writing the output over an input would destroy the only copy of it (the output is
     * renamed into place, so the input is gone even if it was still needed), and a run folder
     * is its run's alone (docs/hardening.md "What a command may overwrite"). */
    if (s == TTT_OK) s = ttt_output_file_check("apply", pos[2], pos, 2, &err);
    if (s == TTT_OK) {
        const ttt_cfg_node *layer = ttt_cfg_get(root, "layer");
        if (!layer)
            s = ttt_cfg_error(&err, TTT_ERR_CONFIG, root,
                              "missing 'layer' (the layer to run, as in an experiment file)");
        else
            s = ttt_apply_file_threads(layer, pos[1], pos[2], threads, &err);
    }
    ttt_cfg_free(root);
    if (s != TTT_OK) return report(&err);
    fprintf(stderr, "ttt: wrote %s\n", pos[2]);
    return 0;
}

/* A bound as a reader would write it: integers in full (1048576, not 1.04858e+06). */
static const char *fmt_bound(char *buf, size_t len, double v) {
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(buf, len, "%.0f", v);
    else
        snprintf(buf, len, "%g", v);
    return buf;
}

static void print_options(const ttt_option *o, const char *indent) {
    int w = 16; /* the name column fits the longest name */
    for (const ttt_option *p = o; p && p->name; p++)
        if ((int)strlen(p->name) > w) w = (int)strlen(p->name);
    for (; o && o->name; o++) {
        char range[160] = "", lo[40], hi[40];
        if ((o->type == TTT_OPT_INT || o->type == TTT_OPT_FLOAT || o->type == TTT_OPT_INT_LIST ||
             o->type == TTT_OPT_FLOAT_LIST) && o->min <= o->max)
            snprintf(range, sizeof range, " in [%s, %s]", fmt_bound(lo, sizeof lo, o->min),
                     fmt_bound(hi, sizeof hi, o->max));
        if (o->type == TTT_OPT_CHOICE) snprintf(range, sizeof range, " (%s)", o->choices);
        printf("%s%-*s  default %-24s %s%s\n", indent, w, o->name,
               o->def ? o->def : "(required)", o->help ? o->help : "", range);
    }
}

static int cmd_list(void) {
    printf("Inner optimizers (layer.optimizer.name):\n");
    for (int i = 0; i < ttt_optim_count(); i++) {
        const ttt_optim *o = ttt_optim_at(i);
        printf("  %-16s %s\n", o->name, o->help);
        print_options(o->options + 1, "      "); /* +1: skip `name` */
    }
    printf("\nFast-weight models (layer.model):\n");
    for (int i = 0; i < ttt_model_count(); i++)
        printf("  %-16s %s\n", ttt_model_at(i)->name, ttt_model_at(i)->help);
    printf("\nInner losses (layer.loss):\n");
    for (int i = 0; i < ttt_loss_count(); i++)
        printf("  %-16s %s\n", ttt_loss_at(i)->name, ttt_loss_at(i)->help);
    printf("\nPresets (layer.preset):\n");
    for (int i = 0; i < ttt_preset_count(); i++) {
        const ttt_preset *p = ttt_preset_at(i);
        char optim[256];
        printf("  %-16s %s\n      = (model %s, loss %s, optimizer %s, b %d, %s, steps %s, "
               "position_scale %s)\n      recurrence: %s\n",
               p->name, p->help, p->model, p->loss,
               ttt_preset_optimizer_text(p, optim, sizeof optim), p->mini_batch, p->order,
               p->steps, p->position_scale, p->recurrence);
    }
    printf("\nComputation forms (layer.form: auto or a form name; family/form, auto "
           "preference):\n");
    for (int i = 0; i < ttt_form_count(); i++) {
        const ttt_form_entry *e = ttt_form_at(i);
        char name[64];
        snprintf(name, sizeof name, "%s/%s%s", e->family, e->form,
                 e->device == TTT_DEVICE_CUDA ? " (cuda)" : "");
        printf("  %-28s %2d  %s\n", name, e->auto_rank, e->help);
    }
    printf("\nLayer options (layer.*):\n");
    print_options(ttt_layer_options, "  ");
    printf("\nTasks (task.kind):\n");
    for (int i = 0; i < ttt_task_count(); i++) {
        const ttt_task *t = ttt_task_at(i);
        printf("  %-16s %s\n", t->name, t->help);
        print_options(t->options, "      ");
    }
    printf("\nToken mixers of the trained tasks (model.mixer, or the shorthand "
           "layer: {mixer: NAME}):\n");
    for (int i = 0; i < ttt_mixer_count(); i++) {
        const ttt_mixer *mx = ttt_mixer_at(i);
        printf("  %-16s %s\n", mx->name, mx->help);
        print_options(mx->options, "      ");
    }
    printf("\nSequence model of the trained tasks (model.*):\n");
    print_options(ttt_seq_model_options, "  ");
    printf("\nOuter-loop training (train.*):\n");
    print_options(ttt_train_options, "  ");
    printf("\nExperiment file (top level):\n");
    print_options(ttt_experiment_options, "  ");
    printf("  %-16s a mapping of dotted paths to lists: runs the cartesian product\n", "sweep");
    return 0;
}

/* The program restarts itself at most once, with a changed environment, for either of two
 * reasons; each sets the variable that tells the restarted process not to do it again, so there
 * is no loop, and a failed execv leaves the process going on as it is.
 *
 * 1. OpenBLAS starts its worker threads before main, and each maps a buffer of its own; under an
 *    address-space limit too small for them (`ulimit -v`, common on clusters) a worker retries
 *    the mapping forever and the process spins and never exits (docs/hardening.md "Out of
 *    memory"). Then the program starts single-threaded, where the memory checks can refuse
 *    cleanly.
 * 2. OpenBLAS chose its kernels from the CPU model when it was loaded; a release older than the
 *    CPU falls back to generic SSE kernels, 2-4x slower. Unless the user set OPENBLAS_CORETYPE
 *    (never overridden), the program starts with the core the CPU's features call for
 *    (docs/benchmarks.md "OpenBLAS kernels"). */
static void restart_if_needed(char **argv) {
    int restart = 0;
    const double left = ttt_address_space_left();
    if (left >= 0.0 && left < ttt_runtime_reserve() && !getenv("TTT_ADDRESS_LIMIT_RESTART")) {
        setenv("TTT_ADDRESS_LIMIT_RESTART", "1", 1);
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        setenv("OMP_NUM_THREADS", "1", 1);
        restart = 1;
    }
    const ttt_blas_core_choice core = ttt_blas_check_core();
    if (core.action == TTT_BLAS_CORE_SELECT && !getenv(TTT_BLAS_CORE_RESTART_ENV)) {
        ttt_blas_info blas;
        ttt_blas_describe(&blas);
        setenv(TTT_BLAS_CORE_RESTART_ENV, blas.core[0] ? blas.core : "?", 1);
        setenv("OPENBLAS_CORETYPE", core.core, 1);
        restart = 1;
    }
    if (restart) {
        /* the program's own path, not /proc/self/exe, so that the process keeps its name
         * (`ps`, `pgrep ttt`, job schedulers) */
        char self[4096];
        const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
            self[n] = '\0';
            execv(self, argv); /* returns only on failure: then go on as we are */
        }
        if (core.action == TTT_BLAS_CORE_SELECT) unsetenv("OPENBLAS_CORETYPE");
    }
    ttt_blas_warn_core(); /* the restart failed, or OpenBLAS ignored the core it was given */
}

int main(int argc, char **argv) {
    restart_if_needed(argv);
    if (argc < 2) {
        fputs(usage_text, stderr);
        return EXIT_USAGE;
    }
    ttt_provenance_set_command(argc, argv);
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        ttt_blas_info blas;
        ttt_blas_describe(&blas);
        char line[1024];
        ttt_blas_format(line, sizeof line, &blas);
        printf("ttt %s\nBLAS: %s\n", TTT_VERSION, line);
        if (blas.config[0]) printf("BLAS config: %s\n", blas.config);
        printf("CUDA: %s\n", ttt_cuda_describe()); /* runtime, driver, GPUs, or why none */
        return 0;
    }
    if (strcmp(cmd, "run") == 0) {
        ttt_comm comm;
        ttt_error err = {0};
        if (ttt_comm_init(&comm, &argc, &argv, &err) != TTT_OK) return report(&err);
        int rc = cmd_run(argc - 2, argv + 2, &comm);
        /* a rank that failed alone would leave the others waiting: end the whole job */
        if (rc && comm.size > 1 && rc != EXIT_INTERRUPTED) ttt_comm_abort(&comm, rc);
        ttt_comm_finalize();
        return rc;
    }
    if (strcmp(cmd, "merge") == 0) return cmd_merge(argc - 2, argv + 2);
    if (strcmp(cmd, "check") == 0) return cmd_check(argc - 2, argv + 2);
    if (strcmp(cmd, "list") == 0) return cmd_list();
    if (strcmp(cmd, "sample") == 0) return cmd_sample(argc - 2, argv + 2);
    if (strcmp(cmd, "export") == 0) return cmd_export(argc - 2, argv + 2);
    if (strcmp(cmd, "logits") == 0) return cmd_logits(argc - 2, argv + 2);
    if (strcmp(cmd, "apply") == 0) return cmd_apply(argc - 2, argv + 2);
    if (strcmp(cmd, "compare") == 0) return cmd_compare(argc - 2, argv + 2);
    static const char *const commands[] = {"run",    "merge",  "check",  "list",   "apply",
                                           "sample", "export", "logits", "compare"};
    const char *close = ttt_closest_name(cmd, commands, 9);
    fprintf(stderr, "ttt: unknown command '%s'%s%s%s\n(see ttt --help)\n", cmd,
            close ? "; did you mean '" : "", close ? close : "", close ? "'?" : "");
    return EXIT_USAGE;
}
