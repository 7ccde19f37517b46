/* allreduce.c — the MPI anchor for GSum: median microseconds per MPI_Allreduce of one int64.
 * Built and run by benchmarks/anchors.py with mpicc -fopenmp and mpirun when MPI is installed:
 *   mpirun -np N ./allreduce ROUNDS [THREADS]
 * prints "median_us <value> wrong <rounds with a wrong total>" on rank 0.
 *
 * With THREADS > 1 every rank is a hybrid MPI + OpenMP process of that many threads, so that
 * N * THREADS contributors meet, as the threads of N PATHS nodes do: each round, each thread adds
 * its contribution to its rank's sum, the master thread reduces the ranks' sums with one
 * MPI_Allreduce, and every thread checks the total. Thread t of T runs on the (t * C / T)-th of
 * the C CPUs its rank may use (as PATHS kernel threads are pinned); the rank's CPUs are what the
 * launcher gave it. The master thread times each round, from its contribution to the total.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "latencies.h"

/* Binds the calling thread to the (thread * C / threads)-th of the C CPUs in `allowed`. */
static void bind_thread(const cpu_set_t *allowed, int thread, int threads) {
    int cpus = CPU_COUNT(allowed), wanted = thread * cpus / threads, seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, allowed) || seen++ != wanted) continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
        return;
    }
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long rounds = argc > 1 ? atol(argv[1]) : 1000;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    if (rounds <= 0) rounds = 1000;
    if (threads <= 0) threads = 1;
    double *latencies = malloc((size_t)rounds * sizeof *latencies);
    long long wrong = 0, rank_sum = 0, total = 0;
    cpu_set_t allowed;
    int pin = threads > 1 && sched_getaffinity(0, sizeof allowed, &allowed) == 0;
    MPI_Barrier(MPI_COMM_WORLD);
#pragma omp parallel num_threads(threads) reduction(+ : wrong)
    {
        if (pin) bind_thread(&allowed, omp_get_thread_num(), threads);
        for (long i = 0; i < rounds; i++) {
            double begin = MPI_Wtime();
#pragma omp atomic
            rank_sum += i;
#pragma omp barrier
#pragma omp master
            {
                MPI_Allreduce(&rank_sum, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
                rank_sum = 0;
            }
#pragma omp barrier
            if (total != (long long)i * size * threads) wrong++;
#pragma omp master
            latencies[i] = (MPI_Wtime() - begin) * 1e6;
        }
    }
    if (rank == 0) {
        printf("median_us %.3f wrong %lld\n", median_of(latencies, rounds), wrong);
    }
    free(latencies);
    MPI_Finalize();
    return wrong ? 1 : 0;
}
