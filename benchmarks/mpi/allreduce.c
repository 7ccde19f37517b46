/* allreduce.c — the MPI anchor for GSum: median microseconds per MPI_Allreduce of one int64.
 * Built and run by benchmarks/mpi_anchor.py with mpicc/mpirun when MPI is installed:
 *   mpirun -np N ./allreduce ROUNDS   prints "median_us <value>" on rank 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long rounds = argc > 1 ? atol(argv[1]) : 1000;
    if (rounds <= 0) rounds = 1000;
    double *latencies = malloc((size_t)rounds * sizeof *latencies);
    long long wrong = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < rounds; i++) {
        long long mine = i, total = 0;
        double begin = MPI_Wtime();
        MPI_Allreduce(&mine, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        latencies[i] = (MPI_Wtime() - begin) * 1e6;
        if (total != (long long)i * size) wrong++;
    }
    if (rank == 0) {
        qsort(latencies, (size_t)rounds, sizeof *latencies, compare_doubles);
        printf("median_us %.3f wrong %lld\n", latencies[rounds / 2], wrong);
    }
    free(latencies);
    MPI_Finalize();
    return wrong ? 1 : 0;
}
