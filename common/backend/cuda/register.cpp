// Makes "cuda" a device of the programs that link this object (registry.h).
#include "common/backend/cuda/cuda_backend.h"

namespace splitspec::cuda {
namespace {

const bool registered = register_backend("cuda", open);

}  // namespace
}  // namespace splitspec::cuda
