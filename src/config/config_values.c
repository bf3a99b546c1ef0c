/* Lookups in a configuration tree and the typed reading of its scalars (int, float, bool). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <yaml.h>

#include "fault.h"
#include "infile.h"
#include "strbuf.h"
#include "config_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* lookup and conversions                                                                      */

const ttt_cfg_node *ttt_cfg_get(const ttt_cfg_node *map, const char *key) {
    if (!key) return NULL;
    int i = ttt_cfg_find_key(map, key);
    return i < 0 ? NULL : map->items[i];
}

const ttt_cfg_node *ttt_cfg_get_path(const ttt_cfg_node *root, const char *path) {
    if (!root || !path || root->kind != TTT_CFG_MAP) return NULL;
    /* A key may itself contain dots (sweep axes: "sweep" → "layer.preset"), so the remainder
     * is first tried as one key, then split at each dot in turn. */
    const ttt_cfg_node *n = ttt_cfg_get(root, path);
    if (n) return n;
    for (const char *dot = strchr(path, '.'); dot; dot = strchr(dot + 1, '.')) {
        const size_t len = (size_t)(dot - path);
        const ttt_cfg_node *child = NULL;
        for (int i = 0; i < root->n && !child; i++)
            if (strncmp(root->keys[i], path, len) == 0 && root->keys[i][len] == '\0')
                child = root->items[i];
        if (child) {
            n = ttt_cfg_get_path(child, dot + 1);
            if (n) return n;
        }
    }
    return NULL;
}

/* Would a plain scalar with this text be read as a number (by us or another YAML reader)? */
int ttt_cfg_looks_numeric(const char *s) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    if (*p == '.') p++;
    if (ttt_cfg_is_digit(*p)) return 1;
    return ttt_cfg_ieq(p, "inf") || ttt_cfg_ieq(p, "nan") || ttt_cfg_ieq(p, "infinity") ||
           ttt_cfg_ieq(p, ".inf") || ttt_cfg_ieq(p, ".nan") || ttt_cfg_ieq(p, "true") ||
           ttt_cfg_ieq(p, "false");
}

ttt_status ttt_cfg_conv_int(const ttt_cfg_node *n, long *out, const char *label, ttt_error *err) {
    if (n->kind != TTT_CFG_SCALAR || !n->scalar || n->quoted)
        return ttt_cfg_type_error(err, n, label, "an integer");
    const char *s = n->scalar;
    const char *d = (s[0] == '+' || s[0] == '-') ? s + 1 : s;
    if (!ttt_cfg_is_digit(*d)) return ttt_cfg_type_error(err, n, label, "an integer");
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end != '\0') return ttt_cfg_type_error(err, n, label, "an integer");
    if (errno == ERANGE) {
        const char *sep = label && *label ? ": " : "";
        return ttt_cfg_error(err, TTT_ERR_RANGE, n,
                             "%s%s%s is too %s; expected an integer from %ld to %ld",
                             label ? label : "", sep, s, v < 0 ? "small" : "large", LONG_MIN,
                             LONG_MAX);
    }
    *out = v;
    return TTT_OK;
}

ttt_status ttt_cfg_conv_float(const ttt_cfg_node *n, double *out, const char *label,
                             ttt_error *err) {
    if (n->kind != TTT_CFG_SCALAR || !n->scalar || n->quoted)
        return ttt_cfg_type_error(err, n, label, "a number");
    const char *s = n->scalar;
    /* strtod also takes "nan", "inf", hex and leading spaces; only decimal forms are numbers
     * here, so the characters are checked first. */
    int digits = 0;
    for (const char *p = s; *p; p++) {
        if (ttt_cfg_is_digit(*p))
            digits = 1;
        else if (!strchr("+-.eE", *p))
            return ttt_cfg_type_error(err, n, label, "a number");
    }
    if (!digits) return ttt_cfg_type_error(err, n, label, "a number");
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0') return ttt_cfg_type_error(err, n, label, "a number");
    if ((errno == ERANGE && fabs(v) == HUGE_VAL) || !isfinite(v)) {
        const char *sep = label && *label ? ": " : "";
        return ttt_cfg_error(err, TTT_ERR_RANGE, n,
                             "%s%s%s is too %s; expected a finite number (from about "
                             "-1.8e308 to 1.8e308)",
                             label ? label : "", sep, s,
                             v < 0 ? "large in magnitude (negative)" : "large");
    }
    *out = v; /* underflow to 0 or a subnormal is fine */
    return TTT_OK;
}

ttt_status ttt_cfg_conv_bool(const ttt_cfg_node *n, int *out, const char *label, ttt_error *err) {
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    if (n->kind == TTT_CFG_SCALAR && n->scalar && !n->quoted) {
        for (int i = 0; i < 3; i++) {
            if (ttt_cfg_ieq(n->scalar, yes[i])) {
                *out = 1;
                return TTT_OK;
            }
            if (ttt_cfg_ieq(n->scalar, no[i])) {
                *out = 0;
                return TTT_OK;
            }
        }
    }
    return ttt_cfg_type_error(err, n, label, "true or false");
}

ttt_status ttt_cfg_as_int(const ttt_cfg_node *n, long *out, ttt_error *err) {
    TTT_ASSERT(n && out);
    return ttt_cfg_conv_int(n, out, NULL, err);
}

ttt_status ttt_cfg_as_float(const ttt_cfg_node *n, double *out, ttt_error *err) {
    TTT_ASSERT(n && out);
    return ttt_cfg_conv_float(n, out, NULL, err);
}

ttt_status ttt_cfg_as_bool(const ttt_cfg_node *n, int *out, ttt_error *err) {
    TTT_ASSERT(n && out);
    return ttt_cfg_conv_bool(n, out, NULL, err);
}

/* The typed getters read values ttt_cfg_check_map has validated; failing here is a bug in the
 * caller (wrong key or type), so they abort with the key named. */
static const ttt_cfg_node *getter_node(const ttt_cfg_node *map, const char *key,
                                       const char *what) {
    const ttt_cfg_node *n = ttt_cfg_get(map, key);
    if (!n || n->kind != TTT_CFG_SCALAR) {
        fprintf(stderr, "internal error: config key '%s' is %s, not %s (missing a "
                        "ttt_cfg_check_map?)\n",
                key ? key : "(null)", n ? ttt_cfg_kind_name(n) : "missing", what);
        abort();
    }
    return n;
}

static void getter_fail(const char *key, const char *what) {
    fprintf(stderr, "internal error: config key '%s' is not %s (missing a ttt_cfg_check_map?)\n",
            key, what);
    abort();
}

long ttt_cfg_int(const ttt_cfg_node *map, const char *key) {
    long v = 0;
    if (ttt_cfg_conv_int(getter_node(map, key, "an integer"), &v, NULL, NULL) != TTT_OK)
        getter_fail(key, "an integer");
    return v;
}

double ttt_cfg_float(const ttt_cfg_node *map, const char *key) {
    double v = 0;
    if (ttt_cfg_as_float(getter_node(map, key, "a number"), &v, NULL) != TTT_OK)
        getter_fail(key, "a number");
    return v;
}

int ttt_cfg_bool(const ttt_cfg_node *map, const char *key) {
    int v = 0;
    if (ttt_cfg_conv_bool(getter_node(map, key, "a boolean"), &v, NULL, NULL) != TTT_OK)
        getter_fail(key, "a boolean");
    return v;
}

const char *ttt_cfg_str(const ttt_cfg_node *map, const char *key) {
    return getter_node(map, key, "a string")->scalar;
}
