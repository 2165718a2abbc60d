// float32 GEMM through OpenBLAS, and the FP8 GEMM as exact decode + float32 GEMM.
#include "ops/gemm.h"

#include "base/error.h"
#include "numerics/cast.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <vector>

namespace fp8kit::ops {

namespace {

template <Fp8Format F>
constexpr std::array<float, 256> make_table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = fp8kit::decode_fp8<F>(static_cast<uint8_t>(c));
  return t;
}

const std::array<float, 256> kE4M3Values = make_table<Fp8Format::E4M3>();
const std::array<float, 256> kE5M2Values = make_table<Fp8Format::E5M2>();

void check_shape(const GemmShape& s) {
  FP8KIT_CHECK(s.m >= 0 && s.n >= 0 && s.k >= 0, "GEMM dims must be >= 0, got m={} n={} k={}", s.m, s.n, s.k);
}

}  // namespace

namespace {

// One single-threaded OpenBLAS call with explicit leading dimensions.
void sgemm(const GemmShape& s, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
           float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(s.m), static_cast<blasint>(s.n), static_cast<blasint>(s.k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

// OpenBLAS's own threads would compete with the OpenMP team (both spin while waiting, which is
// ruinous on a loaded 2-core machine), so OpenBLAS runs single-threaded and large GEMMs are cut
// into fixed pieces spread over the OpenMP threads instead. The pieces do not depend on the
// thread count, so neither do the results.
const bool kOpenBlasSingleThreaded = (openblas_set_num_threads(1), true);
constexpr int64_t kSplitMinWork = int64_t{1} << 20;  // m * n * k below this: one call
constexpr int64_t kRowsPerPiece = 512;               // row pieces of C
constexpr int64_t kDepthPerPiece = 1024;             // k pieces (partial products summed in order)

}  // namespace

void gemm_f32(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c) {
  check_shape(s);
  (void)kOpenBlasSingleThreaded;
  if (s.m == 0 || s.n == 0) return;
  if (s.k == 0) {
    for (int64_t i = 0; i < s.m * s.n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  const int64_t lda = s.trans_a ? s.m : s.k;
  const int64_t ldb = s.trans_b ? s.k : s.n;
  const bool parallel = !omp_in_parallel() && omp_get_max_threads() > 1;
  if (s.m * s.n * s.k < kSplitMinWork || (s.m <= kRowsPerPiece && s.k <= kDepthPerPiece)) {
    sgemm(s, alpha, a, lda, b, ldb, beta, c, s.n);
    return;
  }
  if (s.m > kRowsPerPiece && s.m >= s.k) {
    // Pieces of rows of C: rows of op(A) are rows of A, or columns of A when transposed.
    const int64_t pieces = (s.m + kRowsPerPiece - 1) / kRowsPerPiece;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t m0 = p * kRowsPerPiece, m1 = std::min(s.m, m0 + kRowsPerPiece);
      GemmShape part = s;
      part.m = m1 - m0;
      const float* a_part = s.trans_a ? a + m0 : a + m0 * lda;
      sgemm(part, alpha, a_part, lda, b, ldb, beta, c + m0 * s.n, s.n);
    }
    return;
  }
  // Long k, small C (weight gradients): partial products over pieces of k, summed in order.
  const int64_t pieces = (s.k + kDepthPerPiece - 1) / kDepthPerPiece;
  const size_t size = static_cast<size_t>(s.m * s.n);
  thread_local std::vector<float> scratch;  // the calling thread's; the team uses `partials`
  scratch.resize(static_cast<size_t>(pieces) * size);
  float* const partials = scratch.data();
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t k0 = p * kDepthPerPiece, k1 = std::min(s.k, k0 + kDepthPerPiece);
    GemmShape part = s;
    part.k = k1 - k0;
    const float* a_part = s.trans_a ? a + k0 * lda : a + k0;
    const float* b_part = s.trans_b ? b + k0 : b + k0 * ldb;
    sgemm(part, 1.0f, a_part, lda, b_part, ldb, 0.0f, partials + static_cast<size_t>(p) * size, s.n);
  }
  for (size_t i = 0; i < size; ++i) {
    float sum = 0.0f;
    for (int64_t p = 0; p < pieces; ++p) sum += partials[static_cast<size_t>(p) * size + i];
    c[i] = beta == 0.0f ? alpha * sum : alpha * sum + beta * c[i];
  }
}

std::span<const float, 256> fp8_values(Fp8Format format) {
  return format == Fp8Format::E4M3 ? std::span<const float, 256>(kE4M3Values)
                                   : std::span<const float, 256>(kE5M2Values);
}

void decode_fp8(std::span<const uint8_t> codes, Fp8Format format, std::span<float> out) {
  FP8KIT_CHECK(codes.size() == out.size(), "decode_fp8: {} codes but room for {} values", codes.size(), out.size());
  const float* table = fp8_values(format).data();
  const int64_t n = static_cast<int64_t>(codes.size());
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = table[codes[i]];
}

void gemm_fp8(const GemmShape& s, const Fp8Operand& a, const Fp8Operand& b, float beta, float* c) {
  check_shape(s);
  // Per-thread scratch for the decoded operands: grows to the largest GEMM seen, then no allocation.
  thread_local std::vector<float> a_values, b_values;
  const size_t a_size = static_cast<size_t>(s.m * s.k), b_size = static_cast<size_t>(s.k * s.n);
  if (a_values.size() < a_size) a_values.resize(a_size);
  if (b_values.size() < b_size) b_values.resize(b_size);
  decode_fp8({a.codes, a_size}, a.format, {a_values.data(), a_size});
  decode_fp8({b.codes, b_size}, b.format, {b_values.data(), b_size});
  gemm_f32(s, a.scale_inv * b.scale_inv, a_values.data(), b_values.data(), beta, c);
}

}  // namespace fp8kit::ops
