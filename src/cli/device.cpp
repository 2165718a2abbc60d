// `fp8kit device`: the CUDA GPUs fp8kit sees and whether they have FP8 tensor cores.
#include "base/error.h"
#include "cli/command.h"

#include <fmt/format.h>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/device.h"
#endif

namespace fp8kit::cli {
namespace {

void run() {
#if FP8KIT_HAVE_CUDA
  const auto devices = cuda::list_devices();
  FP8KIT_CHECK(!devices.empty(), "no CUDA GPU found (is the NVIDIA driver loaded? try nvidia-smi)");
  for (const auto& d : devices) {
    fmt::print("{}: {}, compute {}.{}, {} SMs, {:.1f} GiB, L2 {:.0f} MiB, FP8 tensor cores: {}\n", d.index, d.name,
               d.major, d.minor, d.multiprocessors, d.global_memory_bytes / double(1 << 30),
               d.l2_bytes / double(1 << 20), d.has_fp8() ? "yes" : "no");
  }
#else
  fail("this fp8kit was built without the CUDA backend: rebuild with nvcc on PATH (cmake -DFP8KIT_CUDA=ON)");
#endif
}

void setup(CLI::App& app) { app.callback(run); }

const bool registered = register_command({"device", "List the CUDA GPUs and their FP8 support", setup});

}  // namespace
}  // namespace fp8kit::cli
