/* The peer benchmark's MPI side: every rank all-reduces COUNT float32 values (its rank number) and checks the sum.
 * Built with smpicc and run with smpirun on the platform from star_platform.py; allreduce.py is the same program for
 * simcomm. Usage: allreduce COUNT (default 1048576, i.e. 4 MiB). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long count = argc > 1 ? atol(argv[1]) : 1L << 20;
  float *x = malloc(count * sizeof(float)), *y = malloc(count * sizeof(float));
  for (long i = 0; i < count; i++) x[i] = (float)rank;
  double start = MPI_Wtime();
  MPI_Allreduce(x, y, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double elapsed = MPI_Wtime() - start;
  float expect = (float)size * (size - 1) / 2;
  int wrong = 0;
  for (long i = 0; i < count; i++) wrong += y[i] != expect;
  if (wrong) fprintf(stderr, "rank %d: %d wrong values\n", rank, wrong);
  if (rank == 0) printf("simulated_seconds %.9g result %.1f\n", elapsed, y[0]);
  free(x);
  free(y);
  MPI_Finalize();
  return wrong != 0;
}
