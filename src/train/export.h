/* A trained model's parameters in the names and layouts a PyTorch user expects, and back
 * (docs/training.md "Exporting to PyTorch").
 *
 * ttt multiplies row vectors by weights stored (in, out) (x W, docs/math.md §0); torch.nn.Linear
 * stores (out, in) and computes x Wᵀ. The export writes every weight that the model uses as the
 * right operand of a plain product transposed to (out, in), names it "<ttt name>.weight"
 ("layer3." becomes "layers.3."), every vector the model adds to a product "<ttt name>.bias"
 * ("head.b" becomes "head.bias"), and leaves every other tensor (embedding tables, convolution
 * kernels, gains, learned initial fast weights, gate constants) as it is, under
 * "<ttt name>.weight". Which is which is read off the model itself — one forward pass on one
 * token, recorded: a parameter entering a `matmul` as its untransposed right operand is a
 * product's weight, a vector entering an `add` a bias — so new mixers need no table here. The file's metadata
 * carries, per tensor, its ttt name and layout, and the resolved configuration of the point. */
#ifndef TTT_EXPORT_H
#define TTT_EXPORT_H

#include "seqmodel.h"

#define TTT_EXPORT_FORMAT "ttt-export-1"

/* How a parameter is exported: TTT_EXPORT_LINEAR, a weight the model multiplies as x W
 * (transposed to (out, in)); TTT_EXPORT_BIAS, a vector the model adds to a product; otherwise
 * TTT_EXPORT_AS_IS. */
enum { TTT_EXPORT_AS_IS = 0, TTT_EXPORT_LINEAR = 1, TTT_EXPORT_BIAS = 2 };

/* The export name of ttt parameter `name` of that kind into buf ("layer0.mixer.wq" →
 * "layers.0.mixer.wq.weight", "head.b" → "head.bias", "layer0.mixer.dt_bias" →
 * "layers.0.mixer.dt_bias.bias"). */
void ttt_export_name(char *buf, size_t len, const char *name, int kind);

/* The kind of every parameter (kind: params.n), read off one recorded forward pass. */
ttt_status ttt_export_kinds(int *kind, const ttt_seq_model *m, ttt_error *err);

/* Write m's parameters to `path` (atomic), with `config_yaml` (may be NULL) as the metadata
 * "ttt.config" and `point`, the index of the model's point among the configuration's sweep
 * points (its entry of `resolved:` when it sweeps), as "ttt.point". */
ttt_status ttt_export_write(const char *path, const ttt_seq_model *m, const char *config_yaml,
                            int point, ttt_error *err);

/* Read a file written by ttt_export_write (or by PyTorch with the same names and layouts) into
 * m's parameters: every parameter must be present with its shape (transposed for products);
 * nothing is changed unless all of them are. Errors name the file and the tensor. */
ttt_status ttt_export_read(ttt_seq_model *m, const char *path, ttt_error *err);

/* m's forward pass on the token ids of the tensor "tokens" (B, T) of `in_path` (integer values
 * in any dtype the reader takes), written to `out_path` as "logits" (B, T, V) in float32: the
 * reference a loader of the export compares against (`ttt logits`, docs/training.md "Exporting
 * to PyTorch"). A token model only; any other tensor, or a value that is not an id of the
 * vocabulary, is an error naming the file and the value. */
ttt_status ttt_export_logits(const char *out_path, const ttt_seq_model *m, const char *in_path,
                             ttt_error *err);

#endif
