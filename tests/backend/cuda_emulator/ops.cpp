// The CUDA backend's ops.cu compiled for the CPU emulator.
#include "common/backend/cuda/ops.cu"
