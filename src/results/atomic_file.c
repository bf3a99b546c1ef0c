/* Atomic files (results.h, ttt_afile): written under a temporary name and renamed into place. */
#define _GNU_SOURCE /* fopencookie */
#include "results.h"
#include "fault.h"

#include <assert.h>
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "results_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* atomic files                                                                               */

char *ttt_results_dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ttt_fault_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* The stream under an atomic file: its descriptor and the first write error, kept so that the
 * error reported at commit is the real cause (ENOSPC: "No space left on device"), not the EIO
 * that a stream's sticky error flag would leave (docs/hardening.md "I/O faults"). */
typedef struct afile_io {
    int fd;
    int first_errno;
} afile_io;

/* Every byte or an error: a short write is retried with the rest. */
static ssize_t afile_io_write(void *cookie, const char *buf, size_t size) {
    afile_io *io = cookie;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(io->fd, buf + done, size - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (!io->first_errno) io->first_errno = w < 0 ? errno : EIO;
            return done > 0 ? (ssize_t)done : -1;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

static int afile_io_close(void *cookie) {
    afile_io *io = cookie;
    int rc = 0;
    if (io->fd >= 0 && close(io->fd) != 0) {
        rc = -1;
        if (!io->first_errno) io->first_errno = errno;
    }
    io->fd = -1;
    return rc;
}

static void afile_release(ttt_afile *af) {
    free(af->path);
    free(af->tmp);
    free(af->io);
    af->path = NULL;
    af->tmp = NULL;
    af->io = NULL;
    af->f = NULL;
}

int ttt_afile_fd(const ttt_afile *af) { return af->io ? ((const afile_io *)af->io)->fd : -1; }

ttt_status ttt_fsync_dir_of(const char *path) {
    /* No allocation: this runs after a rename, when the file is in place and running out of
     * memory must not turn a written file into an error. */
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX] = ".";
    if (slash) {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= sizeof dir) {
            errno = ENAMETOOLONG;
            return TTT_ERR_IO;
        }
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return TTT_ERR_IO;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    /* some file systems cannot sync a folder (EINVAL): nothing more can be done there */
    if (rc != 0 && e != EINVAL && e != EROFS) {
        errno = e;
        return TTT_ERR_IO;
    }
    return TTT_OK;
}

ttt_status ttt_afile_open(ttt_afile *af, const char *path, ttt_error *err) {
    af->f = NULL;
    af->path = NULL;
    af->tmp = NULL;
    af->io = NULL;
    if (!path || !*path)
        return ttt_error_set(err, TTT_ERR_IO, "cannot write a file with an empty name");
    /* The temporary file lives next to the target so rename() never crosses file systems;
     * the leading dot keeps it out of casual listings, the pid keeps processes apart. */
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    const char *base = slash ? slash + 1 : path;
    if (!*base) return ttt_error_set(err, TTT_ERR_IO, "cannot write '%s': it names a folder", path);
    size_t tlen = dirlen + strlen(base) + 48;
    af->path = ttt_results_dup_str(path);
    af->tmp = ttt_fault_malloc(tlen);
    afile_io *io = af->io = ttt_fault_malloc(sizeof *io);
    if (!af->path || !af->tmp || !io) {
        afile_release(af);
        return ttt_error_set(err, TTT_ERR_NOMEM, "cannot write '%s': out of memory", path);
    }
    snprintf(af->tmp, tlen, "%.*s.%s" TTT_AFILE_TMP_MARK "%ld", (int)dirlen, path, base,
             (long)getpid());
    io->first_errno = 0;
    io->fd = open(af->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (io->fd < 0) {
        int e = errno;
        afile_release(af);
        return ttt_error_set(err, TTT_ERR_IO, "cannot write '%s': %s", path, strerror(e));
    }
    cookie_io_functions_t fns = {.read = NULL, .write = afile_io_write, .seek = NULL,
                                 .close = afile_io_close};
    af->f = fopencookie(io, "w", fns);
    if (!af->f) {
        close(io->fd);
        unlink(af->tmp);
        afile_release(af);
        return ttt_error_set(err, TTT_ERR_NOMEM, "cannot write '%s': out of memory", path);
    }
    return TTT_OK;
}

ttt_status ttt_afile_commit(ttt_afile *af, ttt_error *err) {
    TTT_ASSERT(af && af->f && af->path && af->tmp && af->io);
    afile_io *io = af->io;
    int e = 0;
    /* The first failed write names the cause; fflush writes what is still buffered. */
    if (fflush(af->f) != 0 || ferror(af->f)) e = io->first_errno ? io->first_errno : EIO;
    /* fsync before rename: otherwise a crash could leave the new name on empty contents. */
    if (!e && fsync(io->fd) != 0) e = errno;
    if (fclose(af->f) != 0 && !e) e = io->first_errno ? io->first_errno : EIO;
    af->f = NULL;
    if (!e && rename(af->tmp, af->path) != 0) e = errno;
    if (e) {
        unlink(af->tmp);
        ttt_error_set(err, TTT_ERR_IO, "cannot write '%s': %s", af->path, strerror(e));
        afile_release(af);
        return TTT_ERR_IO;
    }
    /* the rename itself reaches the disk only with its folder */
    if (ttt_fsync_dir_of(af->path) != TTT_OK) {
        e = errno;
        ttt_error_set(err, TTT_ERR_IO, "cannot write '%s': syncing its folder: %s", af->path,
                      strerror(e));
        afile_release(af);
        return TTT_ERR_IO;
    }
    afile_release(af);
    return TTT_OK;
}

void ttt_afile_abort(ttt_afile *af) {
    if (!af) return;
    if (af->f) fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    afile_release(af);
}

ttt_status ttt_write_file_atomic(const char *path, const char *text, ttt_error *err) {
    ttt_afile af;
    TTT_TRY(ttt_afile_open(&af, path, err));
    fputs(text, af.f);
    return ttt_afile_commit(&af, err);
}

/* Check one prefix of the path: create it, or accept it when it already is a folder. */
static ttt_status mkdir_one(const char *prefix, const char *full, ttt_error *err) {
    if (mkdir(prefix, 0777) == 0) return TTT_OK;
    int e = errno;
    /* Whatever mkdir said (EEXIST, but also EACCES on some file systems for existing
     * folders), an existing folder is fine. */
    struct stat st;
    if (stat(prefix, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return TTT_OK;
        if (strcmp(prefix, full) == 0)
            return ttt_error_set(err, TTT_ERR_IO,
                                 "cannot create folder '%s': it exists and is not a folder", full);
        return ttt_error_set(err, TTT_ERR_IO,
                             "cannot create folder '%s': '%s' exists and is not a folder", full,
                             prefix);
    }
    if (strcmp(prefix, full) == 0)
        return ttt_error_set(err, TTT_ERR_IO, "cannot create folder '%s': %s", full, strerror(e));
    return ttt_error_set(err, TTT_ERR_IO, "cannot create folder '%s': cannot create '%s': %s",
                         full, prefix, strerror(e));
}

ttt_status ttt_mkdirs(const char *path, ttt_error *err) {
    if (!path || !*path)
        return ttt_error_set(err, TTT_ERR_IO, "cannot create a folder with an empty name");
    char *buf = ttt_results_dup_str(path);
    if (!buf)
        return ttt_error_set(err, TTT_ERR_NOMEM, "cannot create folder '%s': out of memory", path);
    /* Drop trailing slashes so the last component is compared against the whole path. */
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = '\0';
    ttt_status s = TTT_OK;
    for (size_t i = 1; i <= len && s == TTT_OK; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        if (buf[i - 1] == '/') continue; /* "a//b" */
        char saved = buf[i];
        buf[i] = '\0';
        s = mkdir_one(buf, i == len ? buf : path, err);
        buf[i] = saved;
    }
    free(buf);
    return s;
}
int ttt_remove_stale_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    const size_t ml = strlen(TTT_AFILE_TMP_MARK);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (n[0] != '.') continue;
        /* ".<name>.tmp.<digits>": the last mark, followed by a pid and nothing else */
        const char *m = NULL;
        for (const char *p = strstr(n + 1, TTT_AFILE_TMP_MARK); p;
             p = strstr(p + 1, TTT_AFILE_TMP_MARK))
            m = p;
        if (!m || m == n + 1 || !m[ml]) continue;
        const char *q = m + ml;
        while (*q >= '0' && *q <= '9') q++;
        if (*q) continue;
        char *path = ttt_results_path(dir, n);
        if (path && unlink(path) == 0) removed++;
        free(path);
    }
    closedir(d);
    return removed;
}
