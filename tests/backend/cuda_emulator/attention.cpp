// The CUDA backend's attention.cu compiled for the CPU emulator.
#include "common/backend/cuda/attention.cu"
