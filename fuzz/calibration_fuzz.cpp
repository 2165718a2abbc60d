// Fuzz target: quant::load_calibration of a file holding the input. It either loads statistics that
// keep the file's promises (amaxes >= 0, full-size histograms) or throws fp8kit::Error.
#include "base/error.h"
#include "fuzz_support.h"
#include "numerics/histogram.h"
#include "quant/calibration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fp8kit;
  const auto path = fuzz::write_input("calibration.safetensors", data, size);
  try {
    const quant::CalibrationStats stats = quant::load_calibration(path);
    FP8KIT_FUZZ_ASSERT(stats.prompts >= 0 && stats.tokens >= 0);
    for (const auto& [name, activation] : stats.activations) {
      FP8KIT_FUZZ_ASSERT(!activation.channel_amax.empty());
      FP8KIT_FUZZ_ASSERT(activation.amax() >= 0.0f);
      FP8KIT_FUZZ_ASSERT(activation.histogram.empty() || activation.histogram.size() == kHistogramBins);
      FP8KIT_FUZZ_ASSERT(activation.percentile(0.999) <= activation.amax());
    }
  } catch (const Error&) {
  }
  return 0;
}
