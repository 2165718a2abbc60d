// `fp8kit device`: the CUDA GPUs fp8kit sees and whether they have FP8 tensor cores.
#include "base/error.h"
#include "cli/command.h"
#include "runtime/device.h"

#include <fmt/format.h>

#if FP8KIT_HAVE_CUDA
#include "runtime/cuda/device_info.h"
#endif

namespace fp8kit::cli {
namespace {

void run() {
  require_cuda();  // says why not: no CUDA backend in this build, no GPU or driver
#if FP8KIT_HAVE_CUDA
  for (const auto& d : cuda::list_devices()) {
    fmt::print("{}: {}, compute {}.{}, {} SMs, {:.1f} GiB, L2 {:.0f} MiB, FP8 tensor cores: {}\n", d.index, d.name,
               d.major, d.minor, d.multiprocessors, d.global_memory_bytes / double(1 << 30),
               d.l2_bytes / double(1 << 20), d.has_fp8() ? "yes" : "no");
  }
#endif
}

void setup(CLI::App& app) { app.callback(run); }

const bool registered = register_command({"device", "List the CUDA GPUs and their FP8 support", setup});

}  // namespace
}  // namespace fp8kit::cli
