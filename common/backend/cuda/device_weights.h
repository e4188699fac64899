#pragma once
// Weight matrices held on the GPU in their device layouts (device.h), made
// from a file's rows or from random values (weights.cu).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/backend/cuda/device.h"

namespace splitspec::cuda {

// Bytes of each of a layout's buffers.
struct DeviceBytes {
  size_t q = 0, s = 0, d = 0;
};
// Throws splitspec::Error for a type the GPU does not run.
DeviceBytes device_bytes(WType type, int64_t rows, int64_t cols);

struct OwnedMatrix {
  WType type = WType::F32;
  int64_t rows = 0, cols = 0;
  DeviceBuffer q, s, d;
  DeviceMatrix view() const;
  size_t bytes() const { return q.bytes() + s.bytes() + d.bytes(); }
};

// Device memory for a matrix (zeroed where tiles pad it). Throws
// splitspec::Error for a type the GPU does not run (naming the ones it
// does), for rows that are not whole blocks, and when memory runs out.
OwnedMatrix allocate_matrix(WType type, int64_t rows, int64_t cols);
// A plain matrix (the file's rows, host memory) into its device layout,
// through `staging` (grown as needed); done when this returns.
OwnedMatrix upload_matrix(const MatrixRef& plain, DeviceBuffer& staging, cudaStream_t stream);
// Normal values (deviation `scale`, from `seed`) in `type`'s layout; K-quants
// by our quantizer, as the CPU writes those values. BF16, F16, F32, Q4_K,
// Q6_K.
OwnedMatrix random_matrix(WType type, int64_t rows, int64_t cols, float scale, uint64_t seed, cudaStream_t stream);
// n floats 1 + a normal value x `scale` (norm gains).
void random_gains(float* out, int64_t n, float scale, uint64_t seed, cudaStream_t stream);

}  // namespace splitspec::cuda
