// `fp8kit bench gemm|quantize`: GPU throughput. gemm: cuBLASLt bf16 vs FP8 GEMMs in TFLOP/s (median
// and best of timed batches after warm-up batches, autotuned algorithms) per tensor, per row x per row
// and block-scaled (1x128 x 128x128), and the ratios to bf16; quantize: the FP8 cast kernels' bandwidth
// at every granularity (per tensor with its transpose and amax, per row, 1 x 32/64/128 groups, 128x128
// blocks) against a device-to-device copy, and the bf16 cast (+ transpose) that a bf16 step runs in
// its place. Needs the CUDA backend and a GPU; says so and fails otherwise.
#include "base/error.h"
#include "cli/command.h"
#include "cli/options.h"
#include "runtime/device.h"

#include <fmt/format.h>

#include <charconv>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#if FP8KIT_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <random>

#include "ops/cuda/block_quantize.h"
#include "ops/cuda/convert.h"
#include "ops/cuda/current_scaling.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/gemm_scales.h"
#include "ops/cuda/quantize.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/device_info.h"
#include "runtime/cuda/stream.h"
#endif

namespace fp8kit::cli {
namespace {

struct Options {
  std::vector<std::string> shapes;
  int iters = 0;  // GEMMs (or kernels) per timed batch; 0 = enough for ~20 ms
  int repeats = 10;
  int warmup = 5;  // untimed batches first: clocks, power state, autotuning, caches
  bool autotune = true;
};

constexpr const char* kMethod =
    "Method: each figure is timed with CUDA events around batches of back-to-back calls (--iters, default about\n"
    "20 ms of GEMMs per batch); --warmup untimed batches run first (clocks, power, autotuning), then --repeats timed\n"
    "batches; the median batch is reported, and for GEMMs the best batch in brackets. GEMMs autotune cuBLASLt's\n"
    "algorithm per shape (fastest of 8 heuristic candidates, GemmOptions::autotune) unless --no-autotune.";

struct Shape {
  int64_t m, n, k;  // for quantize: rows = m, cols = n
};

constexpr int64_t kMaxDimension = 1 << 20;  // beyond any GPU's memory at the sizes it implies

// MxNxK (dims 3) or ROWSxCOLS (dims 2) with each size in 1..kMaxDimension, or nullopt.
std::optional<Shape> parse_shape(const std::string& text, int dims) {
  Shape s{0, 0, 1};
  const char* p = text.data();
  const char* end = p + text.size();
  for (int d = 0; d < dims; ++d) {
    if (d > 0 && (p == end || *p++ != 'x')) return std::nullopt;
    int64_t& size = d == 0 ? s.m : d == 1 ? s.n : s.k;
    const auto [next, error] = std::from_chars(p, end, size);
    if (error != std::errc() || size < 1 || size > kMaxDimension) return std::nullopt;
    p = next;
  }
  if (p != end) return std::nullopt;
  return s;
}

// Checks each --shapes entry while parsing, so a bad one fails before any GPU work (or none).
CLI::Validator shape_validator(int dims) {
  return CLI::Validator(
      [dims](std::string& text) -> std::string {
        if (parse_shape(text, dims)) return "";
        return fmt::format("bad shape '{}': write {} of whole numbers from 1 to {}, e.g. {}", text,
                           dims == 3 ? "MxNxK" : "ROWSxCOLS", kMaxDimension,
                           dims == 3 ? "8192x8192x8192" : "16384x4096");
      },
      dims == 3 ? "MxNxK" : "ROWSxCOLS");
}

#if FP8KIT_HAVE_CUDA
using namespace fp8kit::cuda;

std::vector<Shape> parse_shapes(const std::vector<std::string>& texts, int dims) {
  std::vector<Shape> shapes;
  for (const std::string& text : texts) shapes.push_back(parse_shape(text, dims).value());  // checked when parsed
  return shapes;
}

void require_gpu() {
  require_cuda();
  const auto devices = list_devices();
  FP8KIT_CHECK(devices[0].has_fp8(), "GPU 0 ({}, compute {}.{}) has no FP8 tensor cores (needs 8.9 or later)",
               devices[0].name, devices[0].major, devices[0].minor);
  fmt::print("device: {} ({} SMs, compute {}.{})\n", devices[0].name, devices[0].multiprocessors, devices[0].major,
             devices[0].minor);
}

struct Timing {
  double median_ms, best_ms;  // per call
};

// Runs `warmup` untimed batches of `iters` calls of run(i), then times `repeats` batches with CUDA
// events; returns the median and the fastest batch's ms per call.
template <typename Run>
Timing time_batches(int iters, int warmup, int repeats, Run&& run) {
  const cuda::Event start(true), stop(true);
  for (int i = 0; i < std::max(warmup * iters, 1); ++i) run(i);  // module load, heuristics, clocks
  FP8KIT_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    FP8KIT_CUDA_CHECK(cudaEventRecord(start.get()));
    for (int i = 0; i < iters; ++i) run(i);
    FP8KIT_CUDA_CHECK(cudaEventRecord(stop.get()));
    times.push_back(cuda::elapsed_ms(start, stop) / iters);
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front()};
}

// `count` random N(0,1) floats on the device (never zeros: zeros run faster than real data), made by
// tiling a host pool at shifting offsets.
DeviceBuffer<float> random_floats(size_t count, uint32_t seed) {
  static const std::vector<float> pool = [] {
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> v(size_t{1} << 22);
    for (float& x : v) x = normal(rng);
    return v;
  }();
  DeviceBuffer<float> out(count);
  size_t offset = (seed * 2654435761u) % pool.size();
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(count - done, pool.size() - offset);
    FP8KIT_CUDA_CHECK(cudaMemcpy(out.data() + done, pool.data() + offset, n * sizeof(float), cudaMemcpyHostToDevice));
    done += n;
    offset = (offset + 977) % 4096;
  }
  return out;
}

// An operand quantized with one scale per row or per block (block_quantize.h), scales in the layout
// GemmArgs reads.
struct ScaledOperand {
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> scale_inv, amax;
};

// x [rows, k] quantized as `kind`; Group (1 x 128) scales transposed into Vec128's [groups, rows].
ScaledOperand quantize_scaled(const float* x, int64_t rows, int64_t k, BlockKind kind) {
  const int64_t groups = (k + 127) / 128;
  const int64_t scales = kind == BlockKind::Row ? rows : kind == BlockKind::Group ? rows * groups : (rows + 127) / 128 * groups;
  ScaledOperand o{DeviceBuffer<uint8_t>(rows * k), DeviceBuffer<float>(scales), DeviceBuffer<float>(scales)};
  BlockQuantizeArgs q;
  q.x = x;
  q.rows = rows;
  q.cols = k;
  q.kind = kind;
  q.group = 128;
  q.q = o.codes.data();
  q.scale_inv = o.scale_inv.data();
  q.amax = o.amax.data();
  quantize_blocks(q);
  if (kind == BlockKind::Group) {
    transpose_scales(o.scale_inv.data(), rows, groups, o.amax.data());  // amax's buffer: the layout's scratch
    FP8KIT_CUDA_CHECK(cudaMemcpy(o.scale_inv.data(), o.amax.data(), scales * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  return o;
}

// One set of GEMM inputs and outputs in bf16 and in E4M3: per tensor, per row, and DeepSeek-V3's
// blocks (a in 1 x 128 groups, b in 128 x 128 blocks).
struct GemmBuffers {
  DeviceBuffer<uint16_t> a16, b16, y;
  DeviceBuffer<uint8_t> a8, b8;
  DeviceBuffer<float> scalars;  // [12]: scale, amax, a_scale_inv at 4, b_scale_inv at 8 (16-byte aligned)
  std::vector<ScaledOperand> row, block;  // [a, b] each
};

GemmBuffers make_gemm_buffers(const Shape& s, uint32_t seed) {
  GemmBuffers g{DeviceBuffer<uint16_t>(s.m * s.k), DeviceBuffer<uint16_t>(s.n * s.k), DeviceBuffer<uint16_t>(s.m * s.n),
                DeviceBuffer<uint8_t>(s.m * s.k), DeviceBuffer<uint8_t>(s.n * s.k), DeviceBuffer<float>(12), {}, {}};
  std::vector<float> scalars(12, 1.0f);
  scalars[0] = 64.0f, scalars[1] = 0.0f;
  g.scalars.upload(scalars);
  for (int which = 0; which < 2; ++which) {
    const int64_t rows = which == 0 ? s.m : s.n;
    DeviceBuffer<float> x = random_floats(rows * s.k, seed + which);
    float_to_bf16(x.data(), rows * s.k, (which == 0 ? g.a16 : g.b16).data());
    QuantizeArgs q;
    q.x = x.data();
    q.rows = rows;
    q.cols = s.k;
    q.scale = g.scalars.data();
    q.q = (which == 0 ? g.a8 : g.b8).data();
    q.amax = g.scalars.data() + 1;
    q.scale_inv = g.scalars.data() + 4 + 4 * which;
    quantize_fp8(q);
    g.row.push_back(quantize_scaled(x.data(), rows, s.k, BlockKind::Row));
    g.block.push_back(quantize_scaled(x.data(), rows, s.k, which == 0 ? BlockKind::Group : BlockKind::Tile128));
  }
  FP8KIT_CUDA_CHECK(cudaDeviceSynchronize());
  return g;
}

void bench_gemm(const Options& options) {
  require_gpu();
  std::vector<std::string> texts = options.shapes;
  if (texts.empty())
    texts = {"8192x8192x8192", "4096x4096x4096", "16384x4096x4096", "16384x16384x4096", "2048x3072x768", "32x3072x768"};
  const std::vector<Shape> shapes = parse_shapes(texts, 3);
  GemmContext context(GemmOptions{.autotune = options.autotune});
  GemmContext cublaslt_blocks(GemmOptions{.autotune = options.autotune, .block_kernel = false});
  GemmContext cublaslt_gelu(GemmOptions{.autotune = options.autotune, .resident_kernel = false});
  fmt::print("y[M,N] = a[M,K] . b[N,K]^T, bf16 output; TFLOP/s: median (best) of {} batches after {} warm-up; {}\n",
             options.repeats, options.warmup, options.autotune ? "autotuned" : "heuristic's first algorithm");
  fmt::print("E4M3 operands; scales per tensor, per row x per row (row), 1x128 groups x 128x128 blocks (block: fp8kit's\n"
             "kernel, fp32 promotion every 128 of k; block cuBLASLt: its split accumulation, its only mode for block\n"
             "scales); * = cuBLASLt refused the scale modes and GemmContext's fallback ran (an unscaled GEMM + scaling\n"
             "pass per row, one GEMM per 128 of k for blocks); # = the block row ran on cuBLASLt, not fp8kit's kernel;\n"
             "gelu: per tensor, fast accumulation, bias + GELU into E4M3 codes (r: on fp8kit's short-k kernel,\n"
             "resident_gemm.h), and the same on cuBLASLt\n");
  fmt::print("{:>18} {:>5} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16} {:>9} {:>11}\n", "MxNxK", "sets",
             "bf16", "fp8 fast acc", "fp8 split acc", "fp8 row fast", "fp8 block", "block cuBLASLt", "gelu e4m3",
             "gelu cuBLASLt", "fp8/bf16", "block/bf16");
  for (const Shape& s : shapes) {
    const double flops = 2.0 * s.m * s.n * s.k;
    // Small problems fit in the 50 MB L2: rotate among input sets so every GEMM reads from memory.
    const double set_bytes = 2.0 * (s.m * s.k + s.n * s.k + s.m * s.n) + s.m * s.k + s.n * s.k;
    const int sets = static_cast<int>(std::clamp(std::ceil(256e6 / set_bytes), 1.0, 32.0));
    std::vector<GemmBuffers> buffers;
    for (int i = 0; i < sets; ++i) buffers.push_back(make_gemm_buffers(s, 17 * i + 1));
    const int iters = options.iters > 0 ? options.iters : static_cast<int>(std::clamp(20e-3 * 1e15 / flops, 3.0, 1000.0));

    // scaling: ScaleMode::Scalar per tensor, OuterVec per row, Vec128 the block-scaled GEMM.
    const auto tflops = [&](DType type, bool fast, ScaleMode scaling = ScaleMode::Scalar, GemmContext* on = nullptr,
                            bool gelu = false) {
      const Timing t = time_batches(iters, options.warmup, options.repeats, [&](int i) {
        GemmBuffers& g = buffers[i % sets];
        GemmArgs args;
        args.m = s.m, args.n = s.n, args.k = s.k;
        args.y = g.y.data(), args.y_type = DType::Bf16;
        args.a_type = args.b_type = type;
        if (type == DType::Bf16) {
          args.a = g.a16.data(), args.b = g.b16.data();
        } else if (scaling == ScaleMode::Scalar) {
          args.a = g.a8.data(), args.b = g.b8.data();
          args.a_scale_inv = g.scalars.data() + 4, args.b_scale_inv = g.scalars.data() + 8;
        } else {
          const std::vector<ScaledOperand>& o = scaling == ScaleMode::OuterVec ? g.row : g.block;
          args.a = o[0].codes.data(), args.b = o[1].codes.data();
          args.a_scale_inv = o[0].scale_inv.data(), args.b_scale_inv = o[1].scale_inv.data();
          args.a_scale_mode = scaling;
          args.b_scale_mode = scaling == ScaleMode::OuterVec ? ScaleMode::OuterVec : ScaleMode::Block128;
        }
        args.fast_accumulation = type != DType::Bf16 && fast;
        if (gelu) {  // bias: the first n of b's bf16 values; y_scale: a's scale_inv
          args.epilogue = Epilogue::GeluBias, args.bias = g.b16.data();
          args.y_type = DType::E4M3, args.y_scale = g.scalars.data() + 4;
        }
        (on != nullptr ? *on : context).gemm(args);
      });
      return std::pair{flops / (t.median_ms * 1e-3) / 1e12, flops / (t.best_ms * 1e-3) / 1e12};
    };
    const auto cell = [](std::pair<double, double> median_best, bool fallback = false) {
      return fmt::format("{}{:.1f} ({:.1f})", fallback ? "*" : "", median_best.first, median_best.second);
    };
    const auto bf16 = tflops(DType::Bf16, false), fast = tflops(DType::E4M3, true), split = tflops(DType::E4M3, false);
    const size_t before_row = context.fallback_gemms();
    const auto row = tflops(DType::E4M3, true, ScaleMode::OuterVec);
    const size_t before_block = context.fallback_gemms(), before_kernel = context.block_kernel_gemms();
    const auto block = tflops(DType::E4M3, false, ScaleMode::Vec128);
    const bool row_fallback = before_block != before_row, block_fallback = context.fallback_gemms() != before_block;
    const bool block_cublaslt = context.block_kernel_gemms() == before_kernel;
    const size_t before_cublaslt = cublaslt_blocks.fallback_gemms();
    const auto cublaslt_block = tflops(DType::E4M3, false, ScaleMode::Vec128, &cublaslt_blocks);
    const std::string block_cell = (block_cublaslt && !block_fallback ? "#" : "") + cell(block, block_fallback);
    const size_t before_resident = context.resident_kernel_gemms();
    const auto gelu = tflops(DType::E4M3, true, ScaleMode::Scalar, nullptr, true);
    const auto cublaslt_gelu_tflops = tflops(DType::E4M3, true, ScaleMode::Scalar, &cublaslt_gelu, true);
    const std::string gelu_cell = (context.resident_kernel_gemms() != before_resident ? "r" : "") + cell(gelu);
    fmt::print("{:>18} {:>5} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16} {:>9.2f} {:>11.2f}\n",
               fmt::format("{}x{}x{}", s.m, s.n, s.k), sets, cell(bf16), cell(fast), cell(split), cell(row, row_fallback),
               block_cell, cell(cublaslt_block, cublaslt_blocks.fallback_gemms() != before_cublaslt), gelu_cell,
               cell(cublaslt_gelu_tflops), fast.first / bf16.first, block.first / bf16.first);
  }
}

void bench_quantize(const Options& options) {
  require_gpu();
  const std::vector<Shape> shapes = parse_shapes(options.shapes.empty() ? std::vector<std::string>{"16384x4096"} : options.shapes, 2);
  const int iters = options.iters > 0 ? options.iters : 20;
  fmt::print("GB/s counting bytes read + written once each (fp32 in: 4 B, bf16 in: 2 B, each FP8 output 1 B, each\n"
             "bf16 output 2 B per element); %copy = against cudaMemcpy device-to-device of the fp32 tensor (read +\n"
             "write 8 B per element)\n");
  fmt::print("{:>12} {:<42} {:>9} {:>9} {:>7}\n", "rows x cols", "kernel", "us", "GB/s", "%copy");
  for (const Shape& s : shapes) {
    const int64_t n = s.m * s.n;
    DeviceBuffer<float> x = random_floats(n, 5);
    DeviceBuffer<uint16_t> x16(n);
    float_to_bf16(x.data(), n, x16.data());
    DeviceBuffer<float> copy(n), scalars(3);
    const std::vector<float> init = {0.5f, 0.0f, 0.0f};
    scalars.upload(init);
    DeviceBuffer<uint8_t> q(n), q_t(n);
    const std::string shape = fmt::format("{}x{}", s.m, s.n);

    const double copy_ms = time_batches(iters, options.warmup, options.repeats, [&](int) {
      FP8KIT_CUDA_CHECK(cudaMemcpyAsync(copy.data(), x.data(), n * sizeof(float), cudaMemcpyDeviceToDevice));
    }).median_ms;
    const double copy_gbs = 8.0 * n / (copy_ms * 1e-3) / 1e9;
    fmt::print("{:>12} {:<42} {:>9.1f} {:>9.0f} {:>7}\n", shape, "cudaMemcpy D2D (fp32)", copy_ms * 1e3, copy_gbs, "100%");
    // What a bf16 step does in the FP8 quantization's place: the cast to bf16 with its transposed copy.
    DeviceBuffer<uint16_t> b(n), b_t(n);
    const Bf16Cast cast{x.data(), s.m, s.n, b.data(), b_t.data()};
    const double cast_ms =
        time_batches(iters, options.warmup, options.repeats, [&](int) { float_to_bf16_transposed({&cast, 1}); }).median_ms;
    const double cast_gbs = 8.0 * n / (cast_ms * 1e-3) / 1e9;
    fmt::print("{:>12} {:<42} {:>9.1f} {:>9.0f} {:>6.0f}%\n", shape, "f32 -> bf16 + transposed (no amax)", cast_ms * 1e3,
               cast_gbs, 100.0 * cast_gbs / copy_gbs);

    for (DType in : {DType::F32, DType::Bf16}) {
      for (bool transpose : {true, false}) {
        QuantizeArgs args;
        args.x = in == DType::F32 ? static_cast<const void*>(x.data()) : x16.data();
        args.x_type = in;
        args.rows = s.m;
        args.cols = s.n;
        args.scale = scalars.data();
        args.q = q.data();
        args.q_t = transpose ? q_t.data() : nullptr;
        args.amax = scalars.data() + 1;
        args.scale_inv = scalars.data() + 2;
        const double ms = time_batches(iters, options.warmup, options.repeats, [&](int) { quantize_fp8(args); }).median_ms;
        const double bytes = static_cast<double>(n) * (dtype_size(in) + 1 + (transpose ? 1 : 0));
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        fmt::print("{:>12} {:<42} {:>9.1f} {:>9.0f} {:>6.0f}%\n", shape,
                   fmt::format("{} -> e4m3{} + amax", name(in), transpose ? " + transposed" : ""), ms * 1e3, gbs,
                   100.0 * gbs / copy_gbs);
      }
    }
    // Per tensor with a current scale: an amax-only pass, the scale on the device, the cast.
    DeviceBuffer<float> fp8_max(1);
    fp8_max.upload(std::vector<float>{fp8kit::fp8_max(Fp8Format::E4M3)});
    const int tensor0[] = {0};
    const double current_ms = time_batches(iters, options.warmup, options.repeats, [&](int) {
      QuantizeArgs args;
      args.x = x.data();
      args.rows = s.m;
      args.cols = s.n;
      args.scale = scalars.data();  // any: the amax pass writes no codes
      args.amax = scalars.data() + 1;
      FP8KIT_CUDA_CHECK(cudaMemsetAsync(args.amax, 0, sizeof(float)));
      quantize_fp8(args);
      current_scales(tensor0, args.amax, fp8_max.data(), {}, scalars.data(), scalars.data() + 2, 1, nullptr);
      args.q = q.data();
      quantize_fp8(args);
    }).median_ms;
    const double current_gbs = 5.0 * n / (current_ms * 1e-3) / 1e9;
    fmt::print("{:>12} {:<42} {:>9.1f} {:>9.0f} {:>6.0f}%\n", shape, "f32 -> e4m3 current (amax pass + cast)",
               current_ms * 1e3, current_gbs, 100.0 * current_gbs / copy_gbs);
    // One current scale per row, per 1 x G group and per 128 x 128 block (block_quantize.h).
    const int64_t scales = s.m * ((s.n + 31) / 32);  // the most any granularity needs (1 x 32 groups)
    DeviceBuffer<float> scale_inv(scales), amax(scales);
    struct Granular {
      const char* name;
      BlockKind kind;
      int group;
      bool transpose;
    };
    const Granular granularities[] = {{"per row", BlockKind::Row, 0, false},        {"1x32 groups", BlockKind::Group, 32, false},
                                      {"1x64 groups", BlockKind::Group, 64, false}, {"1x128 groups", BlockKind::Group, 128, false},
                                      {"128x128 blocks", BlockKind::Tile128, 0, false},
                                      {"128x128 blocks + transposed", BlockKind::Tile128, 0, true}};
    for (DType in : {DType::F32, DType::Bf16}) {
      for (const Granular& g : granularities) {
        BlockQuantizeArgs args;
        args.x = in == DType::F32 ? static_cast<const void*>(x.data()) : x16.data();
        args.x_type = in;
        args.rows = s.m;
        args.cols = s.n;
        args.kind = g.kind;
        args.group = g.group;
        args.q = q.data();
        args.q_t = g.transpose ? q_t.data() : nullptr;
        args.scale_inv = scale_inv.data();
        args.amax = amax.data();
        const double ms = time_batches(iters, options.warmup, options.repeats, [&](int) { quantize_blocks(args); }).median_ms;
        const double bytes = static_cast<double>(n) * (dtype_size(in) + 1 + (g.transpose ? 1 : 0));
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        fmt::print("{:>12} {:<42} {:>9.1f} {:>9.0f} {:>6.0f}%\n", shape, fmt::format("{} -> e4m3 {}", name(in), g.name),
                   ms * 1e3, gbs, 100.0 * gbs / copy_gbs);
      }
    }
  }
}
#else  // require_cuda() says why the benchmarks cannot run in this build
void bench_gemm(const Options&) { require_cuda(); }
void bench_quantize(const Options&) { require_cuda(); }
#endif

void add_common(CLI::App* app, Options& options, int dims, const char* shapes_help) {
  app->add_option("--shapes", options.shapes, shapes_help)->delimiter(',')->check(shape_validator(dims));
  app->add_option("--iters", options.iters, "calls per timed batch (default: enough for ~20 ms; quantize: 20)")
      ->check(whole_number(1, 100'000));
  app->add_option("--repeats", options.repeats, "timed batches; the median is reported")
      ->check(whole_number(1, 1'000))
      ->capture_default_str();
  app->add_option("--warmup", options.warmup, "untimed batches before the timed ones")
      ->check(whole_number(0, 1'000))
      ->capture_default_str();
  app->footer(kMethod);
}

void setup(CLI::App& app) {
  auto options = std::make_shared<Options>();
  app.require_subcommand(1);
  CLI::App* gemm = app.add_subcommand(
      "gemm", "bf16 vs FP8 GEMMs (E4M3: per tensor fast and split accumulation, per row, 1x128 x 128x128 blocks, bias + GELU into E4M3; fp8kit's kernels beside cuBLASLt's), TFLOP/s (median and best batch)");
  add_common(gemm, *options, 3,
             "comma-separated MxNxK (default: 8192x8192x8192,4096x4096x4096,16384x4096x4096,16384x16384x4096,"
             "2048x3072x768,32x3072x768)");
  // Autotuning is on by default, so only its negation is a flag (a "!--no-autotune" name in one flag
  // with --autotune shows in --help as "--no-autotune{false}").
  gemm->add_flag_callback("--no-autotune", [options] { options->autotune = false; },
                          "take cuBLASLt's first heuristic algorithm per shape instead of timing up to 8 and keeping "
                          "the fastest");
  gemm->callback([options] { bench_gemm(*options); });
  CLI::App* quantize = app.add_subcommand(
      "quantize", "FP8 quantize bandwidth at every granularity (tensor + transpose + amax, row, 1xG, 128x128) vs a device copy");
  add_common(quantize, *options, 2, "comma-separated ROWSxCOLS (default: 16384x4096)");
  quantize->callback([options] { bench_quantize(*options); });
}

const bool registered = register_command({"bench", "GPU benchmarks: FP8 vs bf16 GEMMs, FP8 quantize bandwidth", setup});

}  // namespace
}  // namespace fp8kit::cli
