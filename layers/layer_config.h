/* What the layer's configuration files share (layers/layer_options.c, layer_presets.c,
 * layer_resolve.c, layer_build.c, layer_parse.c); nothing outside layers/layer_*.c includes it.
 * A `layer:` section or a C descriptor is resolved into a ttt_layer_spec once, and the layer is
 * built from that. */
#ifndef TTT_LAYER_CONFIG_H
#define TTT_LAYER_CONFIG_H

#include "layer.h"

/* Where a resolved value came from. A value the `layer:` section left out is written into it
 * (layers/layer_parse.c) when it came from the preset or its block row, so that
 * config.resolved.yaml shows every value the run used. */
enum { TTT_FROM_DEFAULT, TTT_FROM_PRESET, TTT_FROM_BLOCK, TTT_FROM_GIVEN };

#define TTT_LAYER_MAX_OPTIM_OPTIONS 32
#define TTT_LAYER_MAX_OPTIONS 32

/* A layer's options, every value resolved. */
typedef struct ttt_layer_spec {
    ttt_layer_desc d;        /* every layer-level field set (opts unused: the optimizer's values
                              * are `opt`) */
    const ttt_preset *preset; /* NULL: none */
    const ttt_optim *optim;
    ttt_opt_value opt[TTT_LAYER_MAX_OPTIM_OPTIONS]; /* the optimizer's whole table, in order */
    unsigned char opt_from[TTT_LAYER_MAX_OPTIM_OPTIONS];
    unsigned char from[TTT_LAYER_MAX_OPTIONS]; /* per entry of ttt_layer_options */
} ttt_layer_spec;

/* The entry of ttt_layer_options named key's origin in s. */
unsigned char *ttt_layer_spec_from(ttt_layer_spec *s, const char *key);

/* Every field of d resolved into s; block (NULL but in a TTT mixer's block) is the preset's row
 * of ttt_block_defaults. Given values are checked; errors name the field ("layer.scale: ..."). */
ttt_status ttt_layer_resolve(const ttt_layer_desc *d, const ttt_block_defaults *block,
                             ttt_layer_spec *s, ttt_error *err);
/* The layer from resolved options for key/value dims d_k, d_v; src is the validated `layer:`
 * mapping they were read from (errors are located there), or NULL. */
ttt_status ttt_layer_build_spec(const ttt_layer_spec *s, int d_k, int d_v, ttt_layer *L,
                                const ttt_cfg_node *src, ttt_error *err);

/* ---- typed option values (layers/layer_options.c) ---- */

const ttt_option *ttt_option_find(const ttt_option *table, const char *key);
int ttt_option_count(const ttt_option *table);
/* The scalar text of a typed value, as the YAML reader would accept it: the shortest decimal that
 * reads back to the same double. Returns v->text for text options, else buf. */
const char *ttt_opt_value_text(const ttt_option *o, const ttt_opt_value *v, char *buf, size_t len);
/* The option's default (its table's YAML scalar text) as a typed value. */
ttt_opt_value ttt_opt_value_default(const ttt_option *o);
/* Check a typed value against its option (member, range, choices); path names the field in
 * messages ("layer.optimizer.momentum"). */
ttt_status ttt_opt_value_check(const ttt_option *o, const char *path, const ttt_opt_value *v,
                               ttt_error *err);
/* "layer.model: unknown model 'lineer'; did you mean 'linear'? (valid: ...)". */
ttt_status ttt_layer_check_name(const char *path, const char *what, const char *name,
                                const char *const *names, int count, ttt_error *err);

#endif
