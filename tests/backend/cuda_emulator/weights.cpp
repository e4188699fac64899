// The CUDA backend's weights.cu compiled for the CPU emulator.
#include "common/backend/cuda/weights.cu"
