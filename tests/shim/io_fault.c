/* I/O-failure injection for tests (LD_PRELOAD): the Nth call of one operation on a file under a
 * folder fails. Used by tests/test_io_faults.c on real `ttt run` processes
 * (docs/hardening.md "I/O faults").
 *
 * Environment:
 *   TTT_FAULT_DIR    only files under this folder count (other files, stderr, /proc: never)
 *   TTT_FAULT_OP     write | fsync | rename | mkdir | open   (open: opening for writing)
 *   TTT_FAULT_N      the call that fails, counted from 1 over the operation's calls
 *   TTT_FAULT_KIND   eio | enospc | short   (short: the write stores half of its bytes and
 *                    returns the short count; the next write to that descriptor fails with
 *                    ENOSPC — a disk filling up in the middle of a write)
 *   TTT_FAULT_COUNTS a file: at exit, the number of calls of each operation ("write 12\n" ...)
 *   TTT_FAULT_LOG    a file: as they happen, each successful rename under the folder
 *                    ("rename <absolute target>") and each successful fsync of a folder under it
 *                    ("fsyncdir <absolute folder>"), one a line, so that a test can check that
 *                    every rename is made durable by an fsync of its folder after it
 *
 * Writes through stdio's own buffers (fopen streams) call glibc's internal write and are not
 * seen here; ttt's result and checkpoint files go through write(2) (src/results/atomic_file.c). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

enum { OP_WRITE, OP_FSYNC, OP_RENAME, OP_MKDIR, OP_OPEN, N_OPS };
static const char *const op_names[N_OPS] = {"write", "fsync", "rename", "mkdir", "open"};

static long counts[N_OPS];
static int fault_op = -1;
static long fault_n;
static int fault_errno = EIO, fault_short;
static int short_fd = -1; /* the descriptor whose next write fails after a short one */
static char prefix[4096];
static FILE *log_file; /* TTT_FAULT_LOG, or NULL */
static size_t prefix_len;

__attribute__((constructor)) static void init(void) {
    const char *d = getenv("TTT_FAULT_DIR"), *op = getenv("TTT_FAULT_OP");
    const char *n = getenv("TTT_FAULT_N"), *k = getenv("TTT_FAULT_KIND");
    if (d && realpath(d, prefix)) prefix_len = strlen(prefix);
    for (int i = 0; op && i < N_OPS; i++)
        if (strcmp(op, op_names[i]) == 0) fault_op = i;
    fault_n = n ? atol(n) : 0;
    if (k && strcmp(k, "enospc") == 0) fault_errno = ENOSPC;
    if (k && strcmp(k, "short") == 0) fault_short = 1, fault_errno = ENOSPC;
    const char *lg = getenv("TTT_FAULT_LOG");
    if (lg) log_file = fopen(lg, "a");
}

/* One line of the log (stdio writes through glibc's internal write: not seen by this shim). */
static void log_line(const char *what, const char *path) {
    if (!log_file) return;
    fprintf(log_file, "%s %s\n", what, path);
    fflush(log_file);
}

__attribute__((destructor)) static void fini(void) {
    const char *p = getenv("TTT_FAULT_COUNTS");
    if (!p) return;
    FILE *f = fopen(p, "w");
    if (!f) return;
    for (int i = 0; i < N_OPS; i++) fprintf(f, "%s %ld\n", op_names[i], counts[i]);
    fclose(f);
}

/* The path under the folder? Relative paths are taken from the working directory. */
static int under(const char *path) {
    if (!prefix_len || !path) return 0;
    char abs[8192];
    if (path[0] != '/') {
        char cwd[4096];
        if (!getcwd(cwd, sizeof cwd)) return 0;
        snprintf(abs, sizeof abs, "%s/%s", cwd, path);
        path = abs;
    }
    return strncmp(path, prefix, prefix_len) == 0 &&
           (path[prefix_len] == '/' || path[prefix_len] == '\0');
}

static int fd_under(int fd) {
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = '\0';
    return under(target);
}

/* Count the call; 1 when it is the one to fail. */
static int hit(int op) {
    counts[op]++;
    return op == fault_op && counts[op] == fault_n;
}

typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef int (*fsync_fn)(int);
typedef int (*rename_fn)(const char *, const char *);
typedef int (*mkdir_fn)(const char *, mode_t);
typedef int (*open_fn)(const char *, int, ...);

/* The next definition of `name` (libc's). */
#define REAL(name, type)                                                                       \
    static type real_##name;                                                                   \
    if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t len) {
    REAL(write, write_fn);
    if (fd > 2 && fd_under(fd)) {
        if (fd == short_fd) {
            short_fd = -1;
            errno = ENOSPC;
            return -1;
        }
        if (hit(OP_WRITE)) {
            if (fault_short && len > 1) {
                short_fd = fd;
                return real_write(fd, buf, len / 2);
            }
            errno = fault_errno;
            return -1;
        }
    }
    return real_write(fd, buf, len);
}

int fsync(int fd) {
    REAL(fsync, fsync_fn);
    if (fd_under(fd) && hit(OP_FSYNC)) {
        errno = fault_errno;
        return -1;
    }
    const int r = real_fsync(fd);
    struct stat sb;
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n;
    if (r == 0 && log_file && fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode) &&
        (n = readlink(link, target, sizeof target - 1)) > 0) {
        target[n] = '\0';
        if (under(target)) log_line("fsyncdir", target);
    }
    return r;
}

int rename(const char *from, const char *to) {
    REAL(rename, rename_fn);
    if (under(from) && hit(OP_RENAME)) {
        errno = fault_errno;
        return -1;
    }
    const int r = real_rename(from, to);
    char abs[4096];
    if (r == 0 && log_file && under(from) && realpath(to, abs)) log_line("rename", abs);
    return r;
}

int mkdir(const char *path, mode_t mode) {
    REAL(mkdir, mkdir_fn);
    if (under(path) && hit(OP_MKDIR)) {
        errno = fault_errno;
        return -1;
    }
    return real_mkdir(path, mode);
}

static int open_common(open_fn real, const char *path, int flags,
                       mode_t mode) {
    if ((flags & (O_WRONLY | O_RDWR | O_CREAT)) && under(path) && hit(OP_OPEN)) {
        errno = fault_errno;
        return -1;
    }
    return real(path, flags, mode);
}

int open(const char *path, int flags, ...) {
    REAL(open, open_fn);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & O_CREAT) ? (mode_t)va_arg(ap, int) : 0;
    va_end(ap);
    return open_common(real_open, path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    REAL(open64, open_fn);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & O_CREAT) ? (mode_t)va_arg(ap, int) : 0;
    va_end(ap);
    return open_common(real_open64, path, flags, mode);
}
