#include "common/engine/threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include "common/engine/parallel.h"

#include <thread>

namespace splitspec {

void set_compute_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(n);
  kernels::set_threads(n);
  // OpenBLAS keeps its own pool, sized from OPENBLAS_NUM_THREADS when it is
  // loaded; this resizes it at run time. Looked up dynamically because the BLAS
  // behind LibTorch is chosen by Debian's alternatives, not at link time.
  using SetThreads = void (*)(int);
  if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(n);
}

int compute_threads() { return at::get_num_threads(); }

}  // namespace splitspec
