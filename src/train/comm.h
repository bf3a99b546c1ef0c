/* The processes of a run: one, or the ranks of an MPI job (docs/scaling.md).
 *
 * Everything that talks to MPI is in comm.c, and only there: the trainer and the sweep see this
 * small interface, and a build without MPI (or a program not started by mpirun/srun) gets a
 * communicator of one rank on which every collective is a copy.
 *
 * Every collective must be called by every rank of the communicator, in the same order. */
#ifndef TTT_COMM_H
#define TTT_COMM_H

#include <stddef.h>

#include "status.h"

typedef struct ttt_comm {
    int rank, size;
    int world; /* 1: the MPI job's ranks; 0: this process alone */
} ttt_comm;

/* This process alone (rank 0 of 1). */
extern const ttt_comm ttt_comm_self;

/* Nonzero when the library was built with MPI. */
int ttt_comm_built(void);
/* Nonzero when this process was started by an MPI launcher (mpirun, mpiexec, srun): it sees the
 * environment variables they set. */
int ttt_comm_launched(void);
/* Join the MPI job when launched by one (MPI_Init with threads funnelled; OpenMP threads inside
 * a rank never call MPI), else return this process alone. A program launched by mpirun but
 * built without MPI is an error: its ranks would each run the whole job. */
ttt_status ttt_comm_init(ttt_comm *out, int *argc, char ***argv, ttt_error *err);
/* Leave the MPI job (MPI_Finalize) if ttt_comm_init joined one. */
void ttt_comm_finalize(void);
/* End every rank of the job now with this exit code (MPI_Abort); exit() without MPI. */
void ttt_comm_abort(const ttt_comm *c, int code);

/* Every rank sends `bytes` bytes; recv (size × bytes) receives them in rank order. */
ttt_status ttt_comm_allgather(const ttt_comm *c, void *recv, const void *send, size_t bytes,
                              ttt_error *err);
/* Point to point, in order between a pair of ranks: send `bytes` to rank `to`; receive `bytes`
 * from rank `from`. */
ttt_status ttt_comm_send(const ttt_comm *c, int to, const void *buf, size_t bytes,
                         ttt_error *err);
ttt_status ttt_comm_recv(const ttt_comm *c, int from, void *buf, size_t bytes, ttt_error *err);
/* Rank `root`'s `bytes` at buf on every rank. */
ttt_status ttt_comm_bcast(const ttt_comm *c, int root, void *buf, size_t bytes, ttt_error *err);
/* The logical AND over ranks of `ok` (nonzero = true). */
int ttt_comm_all(const ttt_comm *c, int ok);
/* The minimum and maximum over ranks of v. */
void ttt_comm_minmax(const ttt_comm *c, long v, long *min, long *max);
void ttt_comm_barrier(const ttt_comm *c);

/* A stop without a collective, for ranks that run apart (each its own sweep points): notify
 * tells every other rank (non-blocking sends of a tag of their own); heard says whether a
 * notice arrived, receiving every one that did. Main thread only, outside collectives. */
void ttt_comm_stop_notify(const ttt_comm *c);
int ttt_comm_stop_heard(const ttt_comm *c);

#endif
