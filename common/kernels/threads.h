#pragma once
// Explicit thread counts for the kernels (and OpenBLAS where loaded; training
// also sizes LibTorch's pool: common/train/train_threads.h). Client and
// server may share a small machine, so each process states its budget rather
// than letting both libraries grab every core.
namespace splitspec {

// n <= 0 means default_threads(), which a model's forwards may trade for
// one thread where that times faster (kernels::ThreadChoice).
void set_compute_threads(int n);
int compute_threads();
// OMP_NUM_THREADS when set, else this machine's physical cores (hyper-
// threads share a core's vector units, which the kernels saturate).
int default_threads();
int physical_cores();

}  // namespace splitspec
