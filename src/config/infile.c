/* Non-blocking opening of input files (infile.h). */
#include "infile.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m) {
    return S_ISFIFO(m)    ? "a FIFO (named pipe)"
           : S_ISDIR(m)   ? "a directory"
           : S_ISCHR(m)   ? "a character device"
           : S_ISBLK(m)   ? "a block device"
           : S_ISSOCK(m)  ? "a socket"
                          : "some other kind of file";
}

/* fd (open, non-blocking) as a stream of `mode` when it is a regular file, else closed. */
static FILE *regular_stream(int fd, const char *mode, const char **kind) {
    if (fd < 0) return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        const int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        if (kind) *kind = kind_of(sb.st_mode);
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    /* a regular file: reads never block, but the stream should see ordinary flags */
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, mode);
    if (!f) {
        const int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

FILE *ttt_open_regular(const char *path, const char **kind) {
    if (kind) *kind = "";
    /* O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; the mode is
     * checked on the descriptor itself, so nothing can be swapped in between a stat and the
     * open */
    return regular_stream(open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), "rb", kind);
}

FILE *ttt_open_regular_append(const char *path, const char **kind) {
    if (kind) *kind = "";
    const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                        0666);
    if (fd < 0 && errno == ENXIO) { /* a FIFO no one reads */
        if (kind) *kind = "a FIFO (named pipe)";
        errno = EINVAL;
        return NULL;
    }
    return regular_stream(fd, "a", kind);
}
