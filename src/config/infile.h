/* Opening an input file for reading without ever blocking on it (docs/hardening.md "Inputs that
 * are not files"). fopen on a FIFO waits until some process opens it for writing, which may be
 * never; a device or a directory reads as something other than a file. Every input the library
 * reads — checkpoints, safetensors files, experiment and layer files, token files — is opened
 * here: non-blocking, then checked to be a regular file before a byte is read. */
#ifndef TTT_INFILE_H
#define TTT_INFILE_H

#include <stdio.h>

/* `path` opened for reading ("rb") when it is a regular file (symbolic links followed). NULL
 * otherwise, with errno set: the open's own (ENOENT, EACCES, …), or EINVAL when the path exists
 * but is not a regular file, and then *kind (when not NULL) names what it is ("a FIFO", "a
 * directory", …); *kind is "" in every other case. */
FILE *ttt_open_regular(const char *path, const char **kind);
/* The same for appending ("a"), creating the file when it does not exist (mode 0666 less the
 * umask): a FIFO is refused at once (a non-blocking open for writing fails with ENXIO when no
 * process reads it, and otherwise the mode check refuses it). */
FILE *ttt_open_regular_append(const char *path, const char **kind);

#endif
