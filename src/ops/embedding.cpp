// Tensor-level token + position embedding: argument checks, then the CPU cores (ops/cpu/embedding.cpp)
// with ops::dropout_forward, or the CUDA kernels (ops/cuda/embedding.h) on the context's lane.
#include "ops/embedding.h"

#include "base/error.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#include <cstring>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/embedding.h"
#endif

namespace fp8kit::ops {

namespace {

// tokens [B, T] i32 on the context's device; returns {B, T}.
std::pair<int64_t, int64_t> check_tokens(const Context& c, const Tensor& tokens, std::string_view op) {
  FP8KIT_CHECK(tokens.rank() == 2, "{}: tokens must be [batch, seq] ids, got rank {}", op, tokens.rank());
  check_tensor(c, tokens, {tokens.dim(0), tokens.dim(1)}, DType::I32, op, "tokens");
  return {tokens.dim(0), tokens.dim(1)};
}

// token_grad (or the token table): [V, D] f32 on the context's device; returns {V, D}.
std::pair<int64_t, int64_t> check_table(const Context& c, const Tensor& table, std::string_view op,
                                        std::string_view what) {
  FP8KIT_CHECK(table.rank() == 2, "{}: {} must be [vocabulary, dim], got rank {}", op, what, table.rank());
  check_tensor(c, table, {table.dim(0), table.dim(1)}, DType::F32, op, what);
  return {table.dim(0), table.dim(1)};
}

// The position table or its gradient: [T, D] f32 on the context's device, or empty (numel 0: none).
// Returns whether there is one.
bool check_positions(const Context& c, const Tensor& t, int64_t T, int64_t D, std::string_view op,
                     std::string_view what) {
  if (t.numel() == 0) return false;
  check_tensor(c, t, {T, D}, DType::F32, op, what);
  return true;
}

}  // namespace

void embedding_forward(Context& c, const Tensor& tokens, const Tensor& token_table, const Tensor& position_table,
                       bool bf16, const DropoutSpec& dropout, Tensor& out) {
  constexpr std::string_view op = "embedding_forward";
  const auto [B, T] = check_tokens(c, tokens, op);
  const auto [V, D] = check_table(c, token_table, op, "token_table");
  const bool positions = check_positions(c, position_table, T, D, op, "position_table (or an empty tensor)");
  prepare_output(c, out, {B, T, D}, DType::F32, op, "out");
  if (!c.is_cuda()) {
    embedding_gather(tokens.span<int32_t>(), T, D, token_table.span<float>(),
                     positions ? position_table.span<float>() : std::span<const float>(), bf16, out.span<float>());
    if (const auto mask = dropout_mask(c, dropout)) {
      dropout_forward(*mask, dropout.rate, bf16, out.span<float>(), out.span<float>());
    }
    return;
  }
#if FP8KIT_HAVE_CUDA
  cuda::embedding_forward(cuda::EmbeddingShape{B, T, D, V}, tokens.device_data<int32_t>(),
                          token_table.device_data<float>(), positions ? position_table.device_data<float>() : nullptr,
                          bf16, dropout_site(c, dropout), out.device_data<float>(), stream(c));
#endif
}

void embedding_backward_sort(Context& c, const Tensor& tokens, Tensor& token_grad, Tensor& workspace) {
  constexpr std::string_view op = "embedding_backward_sort";
  [[maybe_unused]] const auto [B, T] = check_tokens(c, tokens, op);
  [[maybe_unused]] const auto [V, D] = check_table(c, token_grad, op, "token_grad");
  if (!c.is_cuda()) return;  // embedding_scatter zeroes and sums in one pass
#if FP8KIT_HAVE_CUDA
  const cuda::EmbeddingShape shape = {B, T, D, V};
  const size_t bytes = cuda::embedding_backward_workspace(shape);
  prepare_output(c, workspace, {static_cast<int64_t>((bytes + 3) / 4)}, DType::I32, op, "workspace");
  cuda::embedding_backward_sort(shape, tokens.device_data<int32_t>(), token_grad.device_data<float>(),
                                workspace.device_data<int32_t>(), workspace.nbytes(), stream(c));
#endif
}

void embedding_backward_sums(Context& c, const Tensor& tokens, const Tensor& dout, Tensor& token_grad,
                             Tensor& position_grad, Tensor& workspace) {
  constexpr std::string_view op = "embedding_backward_sums";
  const auto [B, T] = check_tokens(c, tokens, op);
  const auto [V, D] = check_table(c, token_grad, op, "token_grad");
  check_tensor(c, dout, {B, T, D}, DType::F32, op, "dout");
  const bool positions = check_positions(c, position_grad, T, D, op, "position_grad (or an empty tensor)");
  if (!c.is_cuda()) {
    embedding_scatter(tokens.span<int32_t>(), T, D, dout.span<float>(), token_grad.span<float>(),
                      positions ? position_grad.span<float>() : std::span<float>());
    return;
  }
#if FP8KIT_HAVE_CUDA
  const cuda::EmbeddingShape shape = {B, T, D, V};
  FP8KIT_CHECK(workspace.device() == c.device() && workspace.dtype() == DType::I32 &&
                   workspace.nbytes() >= cuda::embedding_backward_workspace(shape),
               "{}: workspace must be the one embedding_backward_sort sorted the same tokens into (call that first)",
               op);
  cuda::embedding_backward_sums(shape, dout.device_data<float>(), token_grad.device_data<float>(),
                                positions ? position_grad.device_data<float>() : nullptr,
                                workspace.device_data<int32_t>(), workspace.nbytes(), stream(c));
#endif
}

void gather_rows(Context& c, const Tensor& table, const Tensor& ids, Tensor& out) {
  constexpr std::string_view op = "gather_rows";
  FP8KIT_CHECK(table.rank() == 2 && (table.dtype() == DType::Bf16 || table.dtype() == DType::F32),
               "{}: table must be [n, dim] bf16 or f32, got {} [{}]", op, name(table.dtype()),
               fmt::join(table.shape(), ", "));
  check_tensor(c, table, table.shape(), table.dtype(), op, "table");
  FP8KIT_CHECK(ids.rank() == 1, "{}: ids must be [rows] i32, got [{}]", op, fmt::join(ids.shape(), ", "));
  check_tensor(c, ids, ids.shape(), DType::I32, op, "ids");
  FP8KIT_CHECK(!out.shares_storage(table), "{}: out must be a tensor of its own (not table)", op);
  const int64_t n = table.dim(0), dim = table.dim(1), rows = ids.dim(0);
  prepare_output(c, out, {rows, dim}, table.dtype(), op, "out");
  const size_t row_bytes = static_cast<size_t>(dim) * dtype_size(table.dtype());
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::gather_rows(rows, n, static_cast<int64_t>(row_bytes), table.device_data<std::byte>(),
                      ids.device_data<int32_t>(), out.device_data<std::byte>(), stream(c));
#endif
    return;
  }
  const int32_t* id = ids.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r)
    FP8KIT_CHECK(id[r] >= 0 && id[r] < n, "{}: ids[{}] = {} is outside the table's rows [0, {})", op, r, id[r], n);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data<std::byte>() + r * row_bytes, table.data<std::byte>() + id[r] * row_bytes, row_bytes);
}

}  // namespace fp8kit::ops
