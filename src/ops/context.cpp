// Context on the CPU; the CUDA state lives in ops/cuda/context.cpp.
#include "ops/context.h"

#include "base/error.h"

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#endif

namespace fp8kit::ops {

#if !FP8KIT_HAVE_CUDA
struct Context::Cuda {};
#endif

Context::Context(Device device, uint64_t seed) : device_(device), seed_(seed) {
  if (device == Device::Cuda) {
    require_cuda();
#if FP8KIT_HAVE_CUDA
    cuda_ = std::make_unique<Cuda>();
    set_step(0);  // the device counter starts as the host's (cudaMalloc'd memory is not zeroed)
#endif
  }
}

Context::~Context() = default;
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;

Context::Cuda& Context::cuda() {
  FP8KIT_CHECK(cuda_ != nullptr, "this op context runs on the {}, not on a CUDA GPU", name(device_));
  return *cuda_;
}

#if !FP8KIT_HAVE_CUDA
void Context::set_step(uint64_t step) { step_ = step; }
void Context::advance_step() { ++step_; }
void Context::fork(Lane) {}
void Context::join(Lane) {}
void Context::join_all() {}
void Context::follow_all(Lane) {}
void Context::record(Marker&) {}
void Context::wait(const Marker&) {}
void Context::synchronize() {}
void* Context::scratch(size_t) { fail("scratch memory is for CUDA op contexts"); }
#endif

}  // namespace fp8kit::ops
