/* The processes of a run (comm.h). The only file that includes mpi.h; CMake defines
 * TTT_HAVE_MPI for it when the build found MPI. */
#include "comm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef TTT_HAVE_MPI
#include <mpi.h>
#endif

const ttt_comm ttt_comm_self = {.rank = 0, .size = 1, .world = 0};

static int joined;

int ttt_comm_built(void) {
#ifdef TTT_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

int ttt_comm_launched(void) {
    /* Open MPI's mpirun, PMIx launchers (srun --mpi=pmix, prrte), MPICH's Hydra / PMI. */
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

ttt_status ttt_comm_init(ttt_comm *out, int *argc, char ***argv, ttt_error *err) {
    *out = ttt_comm_self;
    if (!ttt_comm_launched()) return TTT_OK;
#ifdef TTT_HAVE_MPI
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return ttt_error_set(err, TTT_ERR_IO, "MPI_Init failed");
    joined = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &out->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &out->size);
    out->world = 1;
    return TTT_OK;
#else
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n) n = getenv("PMI_SIZE");
    if (n && atoi(n) <= 1) return TTT_OK; /* a job of one rank is this process alone */
    return ttt_error_set(err, TTT_ERR_CONFIG,
                         "started by an MPI launcher, but this ttt was built without MPI: "
                         "install libopenmpi-dev and rebuild (cmake -DTTT_MPI=ON), or run "
                         "without mpirun (docs/scaling.md)");
#endif
}

void ttt_comm_finalize(void) {
#ifdef TTT_HAVE_MPI
    if (joined) MPI_Finalize();
#endif
    joined = 0;
}

void ttt_comm_abort(const ttt_comm *c, int code) {
#ifdef TTT_HAVE_MPI
    if (c && c->world && joined) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    exit(code);
}

#ifdef TTT_HAVE_MPI
/* MPI counts are ints: a large buffer goes as blocks of a contiguous type of 1 MiB (the caller
 * frees *t when it is not MPI_BYTE). */
static ttt_status mpi_count(size_t bytes, MPI_Datatype *t, int *count, ttt_error *err) {
    const size_t block = (size_t)1 << 20;
    *t = MPI_BYTE;
    size_t n = bytes;
    if (bytes > INT32_MAX) {
        if (bytes % block != 0)
            return ttt_error_set(err, TTT_ERR_SHAPE,
                                 "MPI: a message of %zu bytes is over 2 GiB and not whole MiB",
                                 bytes);
        MPI_Type_contiguous((int)block, MPI_BYTE, t);
        MPI_Type_commit(t);
        n = bytes / block;
    }
    *count = (int)n;
    return TTT_OK;
}
#endif

ttt_status ttt_comm_allgather(const ttt_comm *c, void *recv, const void *send, size_t bytes,
                              ttt_error *err) {
    if (!c->world || c->size == 1) {
        if (recv != send) memmove(recv, send, bytes);
        return TTT_OK;
    }
#ifdef TTT_HAVE_MPI
    MPI_Datatype t;
    int n = 0;
    TTT_TRY(mpi_count(bytes, &t, &n, err));
    int rc = MPI_Allgather(send, n, t, recv, n, t, MPI_COMM_WORLD);
    if (t != MPI_BYTE) MPI_Type_free(&t);
    if (rc != MPI_SUCCESS) return ttt_error_set(err, TTT_ERR_IO, "MPI_Allgather failed");
    return TTT_OK;
#else
    return ttt_error_set(err, TTT_ERR_IO, "built without MPI");
#endif
}

ttt_status ttt_comm_send(const ttt_comm *c, int to, const void *buf, size_t bytes,
                         ttt_error *err) {
#ifdef TTT_HAVE_MPI
    if (c->world) {
        MPI_Datatype t;
        int n = 0;
        TTT_TRY(mpi_count(bytes, &t, &n, err));
        int rc = MPI_Send(buf, n, t, to, 0, MPI_COMM_WORLD);
        if (t != MPI_BYTE) MPI_Type_free(&t);
        if (rc != MPI_SUCCESS) return ttt_error_set(err, TTT_ERR_IO, "MPI_Send to rank %d failed", to);
        return TTT_OK;
    }
#endif
    return ttt_error_set(err, TTT_ERR_ARG, "send to rank %d: this process is alone", to);
}

ttt_status ttt_comm_recv(const ttt_comm *c, int from, void *buf, size_t bytes, ttt_error *err) {
#ifdef TTT_HAVE_MPI
    if (c->world) {
        MPI_Datatype t;
        int n = 0;
        TTT_TRY(mpi_count(bytes, &t, &n, err));
        int rc = MPI_Recv(buf, n, t, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (t != MPI_BYTE) MPI_Type_free(&t);
        if (rc != MPI_SUCCESS)
            return ttt_error_set(err, TTT_ERR_IO, "MPI_Recv from rank %d failed", from);
        return TTT_OK;
    }
#endif
    return ttt_error_set(err, TTT_ERR_ARG, "receive from rank %d: this process is alone", from);
}

ttt_status ttt_comm_bcast(const ttt_comm *c, int root, void *buf, size_t bytes, ttt_error *err) {
    if (!c->world || c->size == 1) return TTT_OK;
#ifdef TTT_HAVE_MPI
    MPI_Datatype t;
    int n = 0;
    TTT_TRY(mpi_count(bytes, &t, &n, err));
    int rc = MPI_Bcast(buf, n, t, root, MPI_COMM_WORLD);
    if (t != MPI_BYTE) MPI_Type_free(&t);
    if (rc != MPI_SUCCESS) return ttt_error_set(err, TTT_ERR_IO, "MPI_Bcast failed");
    return TTT_OK;
#else
    return ttt_error_set(err, TTT_ERR_IO, "built without MPI");
#endif
}

int ttt_comm_all(const ttt_comm *c, int ok) {
    int v = ok != 0;
#ifdef TTT_HAVE_MPI
    if (c->world && c->size > 1) {
        int r = 0;
        MPI_Allreduce(&v, &r, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
        return r;
    }
#endif
    return v;
}

void ttt_comm_minmax(const ttt_comm *c, long v, long *min, long *max) {
    *min = *max = v;
#ifdef TTT_HAVE_MPI
    if (c->world && c->size > 1) {
        MPI_Allreduce(&v, min, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&v, max, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    }
#endif
}

void ttt_comm_barrier(const ttt_comm *c) {
#ifdef TTT_HAVE_MPI
    if (c->world && c->size > 1) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

/* The stop notice (comm.h): a message of its own tag, never matched by the receives above (tag 0
 * from a named rank). */
enum { TAG_STOP = 77 };

void ttt_comm_stop_notify(const ttt_comm *c) {
#ifdef TTT_HAVE_MPI
    static const int one = 1; /* stays valid until the sends complete */
    if (!c->world || c->size < 2) return;
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        MPI_Request req;
        if (MPI_Isend((void *)&one, 1, MPI_INT, r, TAG_STOP, MPI_COMM_WORLD, &req) == MPI_SUCCESS)
            MPI_Request_free(&req);
    }
#else
    (void)c;
#endif
}

int ttt_comm_stop_heard(const ttt_comm *c) {
#ifdef TTT_HAVE_MPI
    if (!c->world || c->size < 2) return 0;
    int heard = 0;
    for (;;) { /* every notice that arrived (several ranks may have sent one) */
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_STOP, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS || !flag)
            break;
        int v;
        MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, TAG_STOP, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        heard = 1;
    }
    return heard;
#else
    (void)c;
    return 0;
#endif
}
