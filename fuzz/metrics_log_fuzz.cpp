// Fuzz target: report::read_metrics_log of a file holding the input (a training run's metrics.jsonl,
// as `fp8kit report` reads it), then the health page of what it read. Either the page renders or the
// reader throws fp8kit::Error.
#include "base/error.h"
#include "fuzz_support.h"
#include "report/health.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fp8kit;
  const auto path = fuzz::write_input("metrics.jsonl", data, size);
  try {
    report::RunLog run;
    report::read_metrics_log(path, run);
    const std::string page = report::health_report(run).render();
    FP8KIT_FUZZ_ASSERT(page.find("</html>") != std::string::npos);
  } catch (const Error&) {
  }
  return 0;
}
