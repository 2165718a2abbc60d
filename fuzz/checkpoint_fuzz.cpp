// Fuzz target: io::load_checkpoint of a file holding the input, into a small fixed model. It either
// loads or throws fp8kit::Error, and a rejected checkpoint leaves the model untouched.
#include "base/error.h"
#include "fuzz_support.h"
#include "io/checkpoint.h"

#include <algorithm>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fp8kit;
  const auto path = fuzz::write_input("checkpoint.safetensors", data, size);
  fuzz::CheckpointState state;
  const auto entries = state.entries();
  try {
    io::load_checkpoint(path, entries, fuzz::kCheckpointRequirements);
  } catch (const Error&) {
    for (const auto& e : entries) FP8KIT_FUZZ_ASSERT(std::ranges::all_of(e.data, [](float v) { return v == 0; }));
  }
  return 0;
}
