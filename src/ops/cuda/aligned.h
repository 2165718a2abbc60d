// Pointer alignment checks of the kernels' launchers: vector loads and stores of a row need it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fp8kit::cuda {

// Whether p is `bytes`-aligned.
inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace fp8kit::cuda
