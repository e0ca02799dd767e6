/* Two-process point-to-point latency outside strata, as the pipeline sees it: the
 * receiver has posted its MPI_Irecv and polls; the sender posts MPI_Isend and then
 * computes without entering MPI (as a pipeline stage does after posting its send). For
 * each message: the time from the send's post to the receive's completion, on one
 * CLOCK_MONOTONIC (same host). docs/pipeline.md, "Where the per-exchange time goes".
 *
 *   mpicc -O2 -o /tmp/p2p_latency scripts/p2p_latency.c
 *   mpirun --allow-run-as-root --oversubscribe -np 2 /tmp/p2p_latency [bytes] [poll] [n]
 *
 * poll: spin (MPI_Test in a loop), yield (MPI_Test + sched_yield, strata's inline wait),
 * sleep50 (MPI_Test + 50 us sleep, strata's comm-thread wait), or late: the receiver
 * posts its receive 0.7 ms after the send was posted and times MPI_Irecv to completion
 * (what completing an arrived message costs the receiver), or latecold: late, after
 * streaming through 32 MiB (caches cold, as after a forward or backward). The sender computes compute_us (3000)
 * after its post (a busy loop, no MPI) and waits for its send only then.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static void busy(double us) {
  const double t = now_us();
  volatile double x = 0;
  while (now_us() - t < us) x += 1.0;
}

static int late_mode(const char* poll) { return strncmp(poll, "late", 4) == 0; }

static double evict[4 << 20];  // 32 MiB, beyond the last-level cache

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const long bytes = argc > 1 ? atol(argv[1]) : 131072;
  const char* poll = argc > 2 ? argv[2] : "yield";
  const int n = argc > 3 ? atoi(argv[3]) : 200;
  const double compute_us = argc > 4 ? atof(argv[4]) : 3000;
  char* buf = malloc((size_t)bytes);
  memset(buf, 1, (size_t)bytes);
  double* lat = malloc(sizeof(double) * (size_t)n);
  for (int i = 0; i < n; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t_post = 0;
    if (rank == 0) {
      busy(300);  // the receiver is polling by now
      MPI_Request q;
      t_post = now_us();
      MPI_Isend(buf, (int)bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD, &q);
      busy(compute_us);  // compute, no MPI
      MPI_Wait(&q, MPI_STATUS_IGNORE);
      MPI_Send(&t_post, 1, MPI_DOUBLE, 1, 8, MPI_COMM_WORLD);
    } else {
      const int late = strncmp(poll, "late", 4) == 0;
      if (late) busy(1000);  // the send is posted (and waiting) before this receive
      if (strcmp(poll, "latecold") == 0) {  // as after a compute: MPI's code and data out of the caches
        for (size_t k = 0; k < sizeof(evict) / sizeof(evict[0]); k += 8) evict[k] += 1.0;
      }
      const double t_irecv = now_us();
      MPI_Request q;
      MPI_Irecv(buf, (int)bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, &q);
      int done = 0;
      while (!done) {
        MPI_Test(&q, &done, MPI_STATUS_IGNORE);
        if (done) break;
        if (strcmp(poll, "yield") == 0) sched_yield();
        if (strcmp(poll, "sleep50") == 0) {
          struct timespec ts = {0, 50000};
          nanosleep(&ts, NULL);
        }
      }
      const double t_done = now_us();
      MPI_Recv(&t_post, 1, MPI_DOUBLE, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      lat[i] = late ? t_done - t_irecv : t_done - t_post;
    }
  }
  if (rank == 1) {
    qsort(lat, (size_t)n, sizeof(double), cmp);
    printf("%ld bytes, poll %s, %d messages: %s us p10 %.1f p50 %.1f p90 %.1f max %.1f\n",
           bytes, poll, n, late_mode(poll) ? "receive post -> complete (data there)" : "send post -> receive complete", lat[n / 10], lat[n / 2], lat[n * 9 / 10], lat[n - 1]);
  }
  free(lat);
  free(buf);
  MPI_Finalize();
  return 0;
}
