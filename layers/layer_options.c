/* The `layer:` options (ttt_layer_options) and typed option values: what the descriptor's fields,
 * the presets' values and the optimizers' options are checked and written with. */
#include "layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer_config.h"

/* ------------------------------------------------------------------------------------------ */
/* Configuration */

const ttt_option ttt_layer_options[] = {
    {"preset", TTT_OPT_STRING, "none", TTT_NO_RANGE, NULL,
     "a named tuple (see `ttt list`); its values are the defaults of the keys below"},
    {"model", TTT_OPT_STRING, "linear", TTT_NO_RANGE, NULL, "fast-weight model f(W; x)"},
    {"loss", TTT_OPT_STRING, "dot", TTT_NO_RANGE, NULL, "inner loss l(f(W; k), v)"},
    {"optimizer", TTT_OPT_MAP, "{name: sgd}", TTT_NO_RANGE, NULL,
     "inner optimizer and its options (a name alone is accepted)"},
    {"mini_batch", TTT_OPT_INT, "1", 1, 1e9, NULL, "tokens per inner step b"},
    {"order", TTT_OPT_CHOICE, "update_then_apply", TTT_NO_RANGE,
     "update_then_apply|apply_then_update", "whether a token reads its own block's update"},
    {"steps", TTT_OPT_CHOICE, "per_block", TTT_NO_RANGE, "per_block|per_token",
     "one optimizer step per block (summed gradient) or one per token (gradients at the block "
     "start)"},
    {"position_scale", TTT_OPT_CHOICE, "none", TTT_NO_RANGE, "none|inverse",
     "inverse: token i of a block reads with lr/(i+1) (TTT-Linear/MLP)"},
    {"form", TTT_OPT_STRING, "auto", TTT_NO_RANGE, NULL,
     "computation form (see `ttt list`); auto = per call, the fastest form available for the "
     "call's inputs, else the generic driver"},
    {"chunk", TTT_OPT_INT, "16", 1, 1 << 20, NULL,
     "chunk size C of the chunkwise forms; 16 = the fastest forward and training step measured "
     "(docs/benchmarks.md \"Chunk size\")"},
    {"scale", TTT_OPT_FLOAT, "1.0", 0.0, 1e6, NULL, "queries are multiplied by this"},
    {"rope", TTT_OPT_BOOL, "false", TTT_NO_RANGE, NULL,
     "rotate q and k by their positions (RoPE, interleaved pairs) before the inner loop"},
    {"rope_base", TTT_OPT_FLOAT, "10000.0", 1.0, 1e9, NULL, "RoPE frequency base"},
    {"normalize", TTT_OPT_CHOICE, "none", TTT_NO_RANGE, "none|ratio|rms",
     "ratio: normalized linear attention (o = phi(q)S/(phi(q)z + 1e-6), phi = feature_map); "
     "rms: post-norm"},
    {"feature_map", TTT_OPT_STRING, "elu1", TTT_NO_RANGE, NULL,
     "phi of normalize: ratio, on q and k: elu1, or random features favor, "
     "favor_orth (Performer), rfa (RFA); the random ones include the softmax scale 1/sqrt(d_k)"},
    {"features", TTT_OPT_INT, "64", 1, 65536, NULL,
     "m, the random features of feature_map favor, favor_orth (width m) and rfa (width 2m)"},
    {"feature_seed", TTT_OPT_INT, "0", 0, 2147483647.0, NULL,
     "seed of the feature map's random matrix: drawn once, fixed for the layer's life (not "
     "trained; the same for every head)"},
    {"feature_gate", TTT_OPT_BOOL, "false", TTT_NO_RANGE, NULL,
     "RFA's gate with normalize: ratio: token t writes with weight 1 - alpha_t (the per-token "
     "gate of the task or sequence model, or the constant decay)"},
    {"steps_per_token", TTT_OPT_INT, "1", 1, 64, NULL,
     "n_h: delta-rule steps per token on n_h key/value pairs (Gated DeltaProduct, docs/math.md "
     "4.6); k, v and eta then have n_h rows per token, q and the gate one"},
    {"levels", TTT_OPT_INT, "1", 1, 48, NULL,
     "log-linear attention (docs/math.md 4.8): this many fast weights at the time scales of a "
     "Fenwick tree, each read with its own query: q then has levels * d_k columns (lambda_t^l "
     "q_t); 1 is the ordinary rule"},
    TTT_OPTION_END,
};

/* ------------------------------------------------------------------------------------------ */
/* Typed option values (the descriptor's path; YAML values are checked by the schema,
 * ttt_cfg_check_given). */

const ttt_option *ttt_option_find(const ttt_option *table, const char *key) {
    for (const ttt_option *o = table; o->name; o++)
        if (strcmp(o->name, key) == 0) return o;
    return NULL;
}

int ttt_option_count(const ttt_option *table) {
    int n = 0;
    while (table[n].name) n++;
    return n;
}

static int is_numeric(ttt_opt_type t) {
    return t == TTT_OPT_INT || t == TTT_OPT_FLOAT || t == TTT_OPT_BOOL;
}

/* The scalar text of a typed value, as the YAML reader would accept it: the shortest decimal that
 * reads back to the same double, so that a value survives the trip through a node exactly. */
const char *ttt_opt_value_text(const ttt_option *o, const ttt_opt_value *v, char *buf, size_t len) {
    if (!is_numeric(o->type)) return v->text;
    if (o->type == TTT_OPT_BOOL)
        snprintf(buf, len, "%s", v->number != 0 ? "true" : "false");
    else if (o->type == TTT_OPT_INT)
        snprintf(buf, len, "%.0f", v->number);
    else {
        snprintf(buf, len, "%.15g", v->number);
        if (strtod(buf, NULL) != v->number) snprintf(buf, len, "%.17g", v->number);
    }
    return buf;
}

/* The option's default (its table's YAML scalar text) as a typed value. */
ttt_opt_value ttt_opt_value_default(const ttt_option *o) {
    ttt_opt_value v = {o->name, 0.0, NULL};
    if (o->type == TTT_OPT_BOOL)
        v.number = o->def && strcmp(o->def, "true") == 0;
    else if (is_numeric(o->type))
        v.number = o->def ? strtod(o->def, NULL) : 0.0;
    else
        v.text = o->def;
    return v;
}

/* Check a typed value against its option: the table says which member it must use, the range
 * and the choices. path names the field in messages ("layer.optimizer.momentum"). */
ttt_status ttt_opt_value_check(const ttt_option *o, const char *path, const ttt_opt_value *v,
                               ttt_error *err) {
    if (is_numeric(o->type) && v->text)
        return ttt_error_set(err, TTT_ERR_CONFIG, "%s: expected %s, got the text '%s'", path,
                             o->type == TTT_OPT_BOOL ? "0 or 1 (false or true)" : "a number",
                             v->text);
    if (!is_numeric(o->type) && !v->text)
        return ttt_error_set(err, TTT_ERR_CONFIG, "%s: expected %s, got no text", path,
                             o->type == TTT_OPT_CHOICE ? o->choices : "a string");
    const double x = v->number;
    switch (o->type) {
    case TTT_OPT_BOOL:
        if (x != 0.0 && x != 1.0)
            return ttt_error_set(err, TTT_ERR_CONFIG,
                                 "%s: expected 0 or 1 (false or true), got %g", path, x);
        return TTT_OK;
    case TTT_OPT_INT:
    case TTT_OPT_FLOAT: {
        const int is_int = o->type == TTT_OPT_INT;
        if (!isfinite(x) || (is_int && x != floor(x)))
            return ttt_error_set(err, TTT_ERR_CONFIG, "%s: expected %s, got %g", path,
                                 is_int ? "an integer" : "a finite number", x);
        if (o->min <= o->max && (x < o->min || x > o->max))
            return ttt_error_set(err, TTT_ERR_RANGE, "%s: expected %s in [%g, %g], got %g", path,
                                 is_int ? "an integer" : "a number", o->min, o->max, x);
        return TTT_OK;
    }
    case TTT_OPT_CHOICE: {
        /* split "a|b|c" in place (no strtok: builds may run on several threads) */
        char choices[256], *names[16];
        snprintf(choices, sizeof choices, "%s", o->choices);
        int n = 0;
        for (char *tok = choices; tok && n < 16;) {
            names[n++] = tok;
            tok = strchr(tok, '|');
            if (tok) *tok++ = '\0';
        }
        for (int i = 0; i < n; i++)
            if (strcmp(names[i], v->text) == 0) return TTT_OK;
        const char *close = ttt_closest_name(v->text, (const char *const *)names, n);
        if (close)
            return ttt_error_set(err, TTT_ERR_CONFIG,
                                 "%s: expected one of %s, got '%s'; did you mean '%s'?", path,
                                 o->choices, v->text, close);
        return ttt_error_set(err, TTT_ERR_CONFIG, "%s: expected one of %s, got '%s'", path,
                             o->choices, v->text);
    }
    default:
        return TTT_OK;
    }
}

/* "layer.model: unknown model 'lineer'; did you mean 'linear'? (valid: ...)". */
ttt_status ttt_layer_check_name(const char *path, const char *what, const char *name,
                                const char *const *names, int count, ttt_error *err) {
    for (int i = 0; i < count; i++)
        if (strcmp(names[i], name) == 0) return TTT_OK;
    char valid[512] = "";
    for (int i = 0; i < count; i++) {
        size_t l = strlen(valid);
        snprintf(valid + l, sizeof valid - l, "%s%s", i ? ", " : "", names[i]);
    }
    const char *close = ttt_closest_name(name, names, count);
    if (close)
        return ttt_error_set(err, TTT_ERR_NAME,
                             "%s: unknown %s '%s'; did you mean '%s'? (valid: %s)", path, what,
                             name, close, valid);
    return ttt_error_set(err, TTT_ERR_NAME, "%s: unknown %s '%s'; expected one of: %s", path, what,
                         name, valid);
}
