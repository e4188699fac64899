// The CUDA backend's linear.cu compiled for the CPU emulator.
#include "common/backend/cuda/linear.cu"
