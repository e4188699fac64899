#include "common/train/train_threads.h"

#include <ATen/Parallel.h>

#include "common/kernels/threads.h"

namespace splitspec {

void set_training_threads(int n) {
  if (n <= 0) n = default_threads();
  at::set_num_threads(n);
  set_compute_threads(n);
}

}  // namespace splitspec
