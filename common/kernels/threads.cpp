#include "common/kernels/threads.h"

#include <dlfcn.h>
#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "common/kernels/parallel.h"

#include <thread>

namespace splitspec {

int physical_cores() {
  static const int n = [] {
    // Distinct (package, core) pairs of the CPUs this process may run on.
    std::set<std::pair<std::string, std::string>> cores;
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    const bool masked = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (masked && !CPU_ISSET(cpu, &allowed)) continue;
      const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
      std::ifstream package(dir + "physical_package_id"), core(dir + "core_id");
      std::string p, c;
      if (package >> p && core >> c) cores.emplace(p, c);
    }
    if (!cores.empty()) return static_cast<int>(cores.size());
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return n;
}

int default_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return physical_cores();
}

void set_compute_threads(int n) {
  // OMP_NUM_THREADS is the user's count too.
  const bool timed = n <= 0 && std::getenv("OMP_NUM_THREADS") == nullptr;
  if (timed) n = default_threads();
  kernels::set_threads(n, timed);
  // OpenBLAS keeps its own pool, sized from OPENBLAS_NUM_THREADS when it is
  // loaded (by LibTorch, in training); this resizes it at run time. Looked up
  // dynamically because inference programs do not link it, and the BLAS
  // behind LibTorch is chosen by Debian's alternatives, not at link time.
  using SetThreads = void (*)(int);
  if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(n);
}

int compute_threads() { return kernels::threads(); }

}  // namespace splitspec
