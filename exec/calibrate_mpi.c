/* Calibration's MPI part: point-to-point messages between ranks 0 and 1
 * over sizes (one-way time: half a round trip, median of repeats), then
 * MPI_Allreduce over groups of the first 2..size ranks, the collective
 * the simulator prices as a ring over the fitted link. */
#include "exec/runtime.h"

#include <stdlib.h>
#include <string.h>

#ifdef SLUICE_HAVE_MPI
#include <mpi.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int mpi_fail(util_err *e, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return util_errf(e, UTIL_EXIT_FAIL, "MPI %s: %.*s", what, len, msg);
}

#define REPS 41

int exec_mpi_calibrate(int quick, exec_calib_xfer *x, int *n,
                       exec_calib_check *checks, int *n_checks, util_err *e)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t maxb = quick ? (4u << 20) : (64u << 20);
    char *buf = util_calloc(maxb, 1);
    double t[REPS];
    int rc = MPI_SUCCESS;
    *n = 0;
    for (size_t b = 64; b <= maxb && *n < 16; b *= 4) {
        int reps = b >= (16u << 20) ? 5 : quick ? 9 : REPS;
        for (int i = 0; i < reps && rc == MPI_SUCCESS; i++) {
            rc = MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            if (rank == 0 && rc == MPI_SUCCESS) {
                rc = MPI_Send(buf, (int)b, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
                if (rc == MPI_SUCCESS)
                    rc = MPI_Recv(buf, (int)b, MPI_BYTE, 1, 7, MPI_COMM_WORLD,
                                  MPI_STATUS_IGNORE);
            } else if (rank == 1 && rc == MPI_SUCCESS) {
                rc = MPI_Recv(buf, (int)b, MPI_BYTE, 0, 7, MPI_COMM_WORLD,
                              MPI_STATUS_IGNORE);
                if (rc == MPI_SUCCESS)
                    rc = MPI_Send(buf, (int)b, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
            }
            t[i] = (MPI_Wtime() - t0) / 2;
        }
        if (rc != MPI_SUCCESS) break;
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        x[(*n)++] = (exec_calib_xfer){(double)b, t[reps / 2] * 1e9};
    }
    /* all-reduce of 4 MiB over the first g ranks */
    size_t nf = quick ? (1u << 16) : (1u << 20);
    float *a = util_calloc(nf, sizeof *a), *s = util_calloc(nf, sizeof *s);
    for (int g = 2; g <= size && rc == MPI_SUCCESS && *n_checks < 16; g++) {
        MPI_Comm sub;
        rc = MPI_Comm_split(MPI_COMM_WORLD, rank < g ? 0 : MPI_UNDEFINED,
                            rank, &sub);
        if (rc != MPI_SUCCESS) break;
        int reps = quick ? 3 : 11;
        for (int i = 0; i < reps && sub != MPI_COMM_NULL; i++) {
            MPI_Barrier(sub);
            double t0 = MPI_Wtime();
            rc = MPI_Allreduce(a, s, (int)nf, MPI_FLOAT, MPI_SUM, sub);
            t[i] = MPI_Wtime() - t0;
            if (rc != MPI_SUCCESS) break;
        }
        if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
        if (rank == 0 && rc == MPI_SUCCESS) {
            qsort(t, (size_t)reps, sizeof *t, cmp_double);
            checks[(*n_checks)++] = (exec_calib_check){
                "MPI_Allreduce", g, (double)nf * sizeof(float),
                t[reps / 2] * 1e9, 0};
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    free(a);
    free(s);
    free(buf);
    if (rc != MPI_SUCCESS) return mpi_fail(e, rc, "calibration");
    return 0;
}

#else

int exec_mpi_calibrate(int quick, exec_calib_xfer *x, int *n,
                       exec_calib_check *checks, int *n_checks, util_err *e)
{
    (void)quick;
    (void)x;
    (void)checks;
    (void)n_checks;
    *n = 0;
    return util_errf(e, UTIL_EXIT_USAGE, "this sluice was built without MPI "
                     "(install libopenmpi-dev and rebuild)");
}

#endif
