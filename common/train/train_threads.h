#pragma once
// Training computes in LibTorch as well as in the kernels: both pools get
// the same explicit count.
namespace splitspec {

// set_compute_threads(n) and LibTorch's intra-op pool; n <= 0 means
// default_threads().
void set_training_threads(int n);

}  // namespace splitspec
