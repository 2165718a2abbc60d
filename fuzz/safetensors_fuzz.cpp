// Fuzz target: io::parse_safetensors on any bytes either returns tensors whose data matches their
// shape and dtype or throws fp8kit::Error; anything else (a crash, another exception) is a bug.
#include "base/error.h"
#include "fuzz_support.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fp8kit;
  try {
    const io::SafetensorsFile file = io::parse_safetensors(std::as_bytes(std::span(data, size)), "fuzz input");
    for (const io::StoredTensor& t : file.tensors) {
      FP8KIT_FUZZ_ASSERT(t.data.size() == static_cast<size_t>(t.element_count()) * io::dtype_size(t.dtype));
    }
  } catch (const Error&) {
  }
  return 0;
}
