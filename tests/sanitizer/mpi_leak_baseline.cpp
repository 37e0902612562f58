// Initializes MPI as Sluice does (runtime/comm/mpi/mpi_runtime.cpp: MPI_THREAD_MULTIPLE, a
// user-defined reduction, a duplicated communicator), runs one collective and finalizes,
// freeing everything it created. Under LeakSanitizer every leak it reports is Open MPI's own:
// tests/sanitizer/CMakeLists.txt runs it with and without openmpi.lsan.supp.
#include <mpi.h>

#include <cstdio>

namespace {

void Sum(void* in, void* inout, int* count, MPI_Datatype*) {
  const float* a = static_cast<const float*>(in);
  float* b = static_cast<float*>(inout);
  for (int i = 0; i < *count; ++i) b[i] += a[i];
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return 1;
  MPI_Op op = MPI_OP_NULL;
  MPI_Op_create(&Sum, /*commute=*/1, &op);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  float value = 1.0f;
  float total = 0.0f;
  MPI_Allreduce(&value, &total, 1, MPI_FLOAT, op, comm);
  int size = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_free(&comm);
  MPI_Op_free(&op);
  MPI_Finalize();
  if (total != static_cast<float>(size)) {
    std::fprintf(stderr, "allreduce gave %g on %d ranks\n", total, size);
    return 1;
  }
  return 0;
}
