// FP8KIT_HOST_DEVICE marks the small functions that the CPU code and the CUDA kernels share (a
// dropout mask's hashes, Adam's learning-rate schedule), so both devices compute them from one text.
#pragma once

#if defined(__CUDACC__)
#define FP8KIT_HOST_DEVICE __host__ __device__
#else
#define FP8KIT_HOST_DEVICE
#endif
