// The KV cache ops on Tensors: argument checks (on the host; the CPU also checks the slots, positions
// and lengths it reads), then the CPU core (ops/cpu/kv_cache.h) or the GPU kernels (ops/cuda/kv_cache.h)
// on the context's current lane.
#include "ops/kv_cache.h"

#include "base/error.h"
#include "ops/cpu/kv_cache.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#include <cmath>
#include <cstdint>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/kv_cache.h"
#endif

namespace fp8kit::ops {

namespace {

// The cache's tensors agree with each other and with c's device; heads is a multiple of its kv_heads.
cpu::KvShape check_cache(const Context& c, const KvCacheLayer& cache, int64_t heads, std::string_view op) {
  FP8KIT_CHECK(cache.kv_heads >= 1 && cache.head_dim >= 2 && cache.k.rank() == 3,
               "{}: the cache is not made: use make_kv_cache_layer", op);
  const DType dtype = cache.k.dtype();
  FP8KIT_CHECK(dtype == DType::Bf16 || dtype == DType::E4M3, "{}: the cache's k must be bf16 or e4m3, got {}", op,
               name(dtype));
  const std::vector<int64_t> shape{cache.slots(), cache.capacity(), cache.kv_heads * cache.head_dim};
  check_tensor(c, cache.k, shape, dtype, op, "cache.k");
  check_tensor(c, cache.v, shape, dtype, op, "cache.v");
  if (cache.fp8()) {
    check_tensor(c, cache.k_scale, {cache.kv_heads}, DType::F32, op, "cache.k_scale");
    check_tensor(c, cache.v_scale, {cache.kv_heads}, DType::F32, op, "cache.v_scale");
  }
  FP8KIT_CHECK(heads >= 1 && heads % cache.kv_heads == 0,
               "{}: heads ({}) must be a positive multiple of the cache's kv_heads ({})", op, heads, cache.kv_heads);
  return {heads, cache.kv_heads, cache.head_dim, cache.slots(), cache.capacity()};
}

// [n] i32 on c's device.
void check_indices(const Context& c, const Tensor& t, int64_t n, std::string_view op, std::string_view what) {
  check_tensor(c, t, {n}, DType::I32, op, what);
}

// Each of values (host) in [lo, hi].
void check_range(const Tensor& values, int64_t lo, int64_t hi, std::string_view op, std::string_view what,
                 std::string_view fix) {
  const int32_t* v = values.data<int32_t>();
  for (int64_t i = 0; i < values.numel(); ++i) {
    FP8KIT_CHECK(v[i] >= lo && v[i] <= hi, "{}: {}[{}] = {} is outside [{}, {}]: {}", op, what, i, v[i], lo, hi, fix);
  }
}

// The cache's storage on its own device (the CPU cores' and the kernels' arguments alike).
cpu::KvData storage(KvCacheLayer& cache) {
  if (!cache.fp8()) return {cache.k.device_data<uint16_t>(), cache.v.device_data<uint16_t>(), nullptr, nullptr};
  return {cache.k.device_data<uint8_t>(), cache.v.device_data<uint8_t>(), cache.k_scale.device_data<float>(),
          cache.v_scale.device_data<float>()};
}
cpu::KvConstData storage(const KvCacheLayer& cache) {
  if (!cache.fp8()) return {cache.k.device_data<uint16_t>(), cache.v.device_data<uint16_t>(), nullptr, nullptr};
  return {cache.k.device_data<uint8_t>(), cache.v.device_data<uint8_t>(), cache.k_scale.device_data<float>(),
          cache.v_scale.device_data<float>()};
}

#if FP8KIT_HAVE_CUDA
// The kernels' 16-byte loads and stores.
void check_aligned(const void* p, std::string_view op, std::string_view what) {
  FP8KIT_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0,
               "{}: {} must be 16-byte aligned on the GPU: pass a tensor of its own, not a view at an odd offset", op,
               what);
}
#endif

}  // namespace

KvCacheLayer make_kv_cache_layer(Context& c, int64_t slots, int64_t capacity, int64_t kv_heads, int64_t head_dim,
                                 DType dtype, Tensor k_scale, Tensor v_scale) {
  constexpr std::string_view op = "make_kv_cache_layer";
  FP8KIT_CHECK(slots >= 1 && capacity >= 1 && kv_heads >= 1,
               "{}: slots ({}), capacity ({}) and kv_heads ({}) must be >= 1", op, slots, capacity, kv_heads);
  FP8KIT_CHECK(head_dim >= 2 && head_dim % 2 == 0, "{}: head_dim must be even and >= 2 (RoPE pairs), got {}", op,
               head_dim);
  FP8KIT_CHECK(dtype == DType::Bf16 || dtype == DType::E4M3, "{}: the cache's dtype must be bf16 or e4m3, got {}", op,
               name(dtype));
  KvCacheLayer cache;
  cache.kv_heads = kv_heads;
  cache.head_dim = head_dim;
  if (dtype == DType::E4M3) {
    for (const auto& [scale, what] : {std::pair<const Tensor&, std::string_view>{k_scale, "k_scale"},
                                      std::pair<const Tensor&, std::string_view>{v_scale, "v_scale"}}) {
      FP8KIT_CHECK(scale.numel() > 0, "{}: an e4m3 cache needs {} ([{}] f32: each KV head's dequantization scale)",
                   op, what, kv_heads);
      check_tensor(c, scale, {kv_heads}, DType::F32, op, what);
      const Tensor host = scale.to(Device::Cpu);
      for (int64_t i = 0; i < kv_heads; ++i) {
        const float s = host.data<float>()[i];
        FP8KIT_CHECK(std::isfinite(s) && s > 0.0f, "{}: {}[{}] = {} must be finite and > 0 (calibrate the model)", op,
                     what, i, s);
      }
    }
    cache.k_scale = std::move(k_scale);
    cache.v_scale = std::move(v_scale);
  } else {
    FP8KIT_CHECK(k_scale.numel() == 0 && v_scale.numel() == 0,
                 "{}: a bf16 cache takes no k_scale / v_scale (they are for e4m3)", op);
  }
  cache.k = Tensor({slots, capacity, kv_heads * head_dim}, dtype, c.device());
  cache.v = Tensor({slots, capacity, kv_heads * head_dim}, dtype, c.device());
  return cache;
}

void kv_append(Context& c, const Tensor& rope_table, const Tensor& qkv, const Tensor& positions, const Tensor& slots,
               int64_t heads, KvCacheLayer& cache, Tensor& q_out, Tensor* k_out, Tensor* v_out) {
  constexpr std::string_view op = "kv_append";
  const cpu::KvShape s = check_cache(c, cache, heads, op);
  const int64_t d = s.head_dim, width = (heads + 2 * s.kv_heads) * d;
  FP8KIT_CHECK(qkv.rank() == 2 && qkv.dim(1) == width,
               "{}: qkv must be [rows, (heads + 2 kv_heads) * head_dim] = [rows, {}], got [{}]", op, width,
               fmt::join(qkv.shape(), ", "));
  check_tensor(c, qkv, qkv.shape(), DType::Bf16, op, "qkv");
  const int64_t rows = qkv.dim(0);
  check_indices(c, positions, rows, op, "positions");
  check_indices(c, slots, rows, op, "slots");
  FP8KIT_CHECK(rope_table.rank() == 3 && rope_table.dim(1) == d / 2 && rope_table.dim(2) == 2,
               "{}: the rope table must be [positions, {}, 2] (rope_table for head_dim {}), got [{}]", op, d / 2, d,
               fmt::join(rope_table.shape(), ", "));
  check_tensor(c, rope_table, rope_table.shape(), DType::F32, op, "rope_table");
  prepare_output(c, q_out, {rows, heads * d}, DType::Bf16, op, "q_out");
  if (k_out != nullptr) prepare_output(c, *k_out, {rows, s.kv_heads * d}, DType::Bf16, op, "k_out");
  if (v_out != nullptr) prepare_output(c, *v_out, {rows, s.kv_heads * d}, DType::Bf16, op, "v_out");
  if (rows == 0) return;
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    FP8KIT_CHECK(d % 16 == 0, "{}: the GPU kernel needs head_dim a multiple of 16, got {}", op, d);
    check_aligned(rope_table.device_data<float>(), op, "rope_table");
    check_aligned(qkv.device_data<uint16_t>(), op, "qkv");
    check_aligned(q_out.device_data<uint16_t>(), op, "q_out");
    if (k_out != nullptr) check_aligned(k_out->device_data<uint16_t>(), op, "k_out");
    if (v_out != nullptr) check_aligned(v_out->device_data<uint16_t>(), op, "v_out");
    cuda::kv_append(s, rows, rope_table.device_data<float>(), qkv.device_data<uint16_t>(),
                    positions.device_data<int32_t>(), slots.device_data<int32_t>(), storage(cache),
                    q_out.device_data<uint16_t>(), k_out == nullptr ? nullptr : k_out->device_data<uint16_t>(),
                    v_out == nullptr ? nullptr : v_out->device_data<uint16_t>(), stream(c));
#endif
    return;
  }
  const int64_t last_position = std::min(s.capacity, rope_table.dim(0)) - 1;
  check_range(positions, 0, last_position, op, "positions",
              "positions must be inside the cache's capacity and the rope table");
  check_range(slots, 0, s.slots - 1, op, "slots", "slots must index the cache's slots");
  cpu::kv_append(s, rows, rope_table.data<float>(), qkv.data<uint16_t>(), positions.data<int32_t>(),
                 slots.data<int32_t>(), storage(cache), q_out.data<uint16_t>(),
                 k_out == nullptr ? nullptr : k_out->data<uint16_t>(),
                 v_out == nullptr ? nullptr : v_out->data<uint16_t>());
}

void decode_attention(Context& c, const Tensor& q, const KvCacheLayer& cache, const Tensor& slots,
                      const Tensor& lengths, int64_t heads, float scale, const ActivationOut& out) {
  constexpr std::string_view op = "decode_attention";
  const cpu::KvShape s = check_cache(c, cache, heads, op);
  FP8KIT_CHECK(q.rank() == 2 && q.dim(1) == heads * s.head_dim,
               "{}: q must be [batch, heads * head_dim] = [batch, {}], got [{}]", op, heads * s.head_dim,
               fmt::join(q.shape(), ", "));
  check_tensor(c, q, q.shape(), DType::Bf16, op, "q");
  const int64_t batch = q.dim(0);
  check_indices(c, slots, batch, op, "slots");
  check_indices(c, lengths, batch, op, "lengths");
  FP8KIT_CHECK(std::isfinite(scale) && scale >= 0.0f, "{}: scale must be finite and >= 0 (0: 1/sqrt(head_dim)), got {}",
               op, scale);
  FP8KIT_CHECK(out.fp8 == nullptr || out.spec.granularity == Granularity::PerTensor,
               "{}: an fp8 out takes a per-tensor scale (a token's heads come from different blocks)", op);
  const float resolved = scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(s.head_dim)) : scale;
  detail::prepare_activation_out(c, out, batch, q.dim(1), op);
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    FP8KIT_CHECK(s.head_dim == 64 || s.head_dim == 128, "{}: the GPU kernel takes head_dim 64 or 128, got {}", op,
                 s.head_dim);
    check_aligned(q.device_data<uint16_t>(), op, "q");
    void* workspace = batch == 0 ? nullptr : c.scratch(cuda::decode_attention_workspace(s, batch, cache.fp8()));
    cuda::decode_attention(s, batch, q.device_data<uint16_t>(), storage(cache), slots.device_data<int32_t>(),
                           lengths.device_data<int32_t>(), resolved, detail::activation_out_args(c, out), workspace,
                           stream(c));
#endif
    return;
  }
  Tensor staging;
  Tensor& y = detail::activation_bf16(out, batch, q.dim(1), staging);
  if (batch > 0) {
    check_range(lengths, 1, s.capacity, op, "lengths", "each sequence needs 1 to capacity cached tokens");
    check_range(slots, 0, s.slots - 1, op, "slots", "slots must index the cache's slots");
    cpu::decode_attention(s, batch, q.data<uint16_t>(), storage(cache), slots.data<int32_t>(),
                          lengths.data<int32_t>(), resolved, y.data<uint16_t>());
  }
  detail::finish_activation_out(c, out, staging);
}

}  // namespace fp8kit::ops
