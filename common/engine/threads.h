#pragma once
// Explicit thread counts for LibTorch's intra-op pool and OpenBLAS. Client and
// server may share a small machine, so each process states its budget rather
// than letting both libraries grab every core.
namespace splitspec {

// n <= 0 means the number of online CPUs.
void set_compute_threads(int n);
int compute_threads();

}  // namespace splitspec
