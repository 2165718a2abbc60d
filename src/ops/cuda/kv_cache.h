// The KV cache on the GPU (ops/kv_cache.h): kv_append's RoPE and cache writes (ops/cpu/kv_cache.h's
// bits) and flash-decoding attention over the cache. Device pointers.
#pragma once

#include <cuda_runtime.h>

#include "ops/cpu/kv_cache.h"
#include "ops/cuda/activation_out.h"

#include <cstddef>
#include <cstdint>

namespace fp8kit::cuda {

// The cache's shape and storage as the CPU cores take them (ops/cpu/kv_cache.h), device pointers here.
using ops::cpu::KvConstData;
using ops::cpu::KvData;
using ops::cpu::KvShape;

// head_dim a multiple of 16; qkv, q_out, k_out, v_out and the cache 16-byte aligned. A thread per 8
// rotated pairs of a head (16-byte loads of both halves).
void kv_append(const KvShape& s, int64_t rows, const float* table, const uint16_t* qkv, const int32_t* positions,
               const int32_t* slots, const KvData& cache, uint16_t* q_out, uint16_t* k_out, uint16_t* v_out,
               cudaStream_t stream);

// The workspace decode_attention needs for this shape and batch (partial results of every chunk).
size_t decode_attention_workspace(const KvShape& s, int64_t batch, bool fp8);

// head_dim 64 or 128; q, out and the cache 16-byte aligned; workspace of decode_attention_workspace
// bytes, 16-byte aligned. Blocks per (sequence, KV head, chunk of keys), then a combine kernel that
// writes `out`: bf16, or E4M3 codes per tensor (not per row: ops::decode_attention refuses that).
void decode_attention(const KvShape& s, int64_t batch, const uint16_t* q, const KvConstData& cache, const int32_t* slots,
                      const int32_t* lengths, float scale, const ActivationOutArgs& out, void* workspace,
                      cudaStream_t stream);

}  // namespace fp8kit::cuda
