// Fuzz target: data::load_text_datasets on an archive holding the input (any format libarchive
// detects, gzip or not). It either loads labelled UTF-8 texts or throws fp8kit::Error.
#include "base/error.h"
#include "data/text_dataset.h"
#include "fuzz_support.h"
#include "text/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fp8kit;
  const auto path = fuzz::write_input("dataset.tar.gz", data, size);
  try {
    const auto datasets = data::load_text_datasets(path, fuzz::kDatasetSubdirs, {.lowercase = true, .warn = false});
    FP8KIT_FUZZ_ASSERT(datasets.size() == fuzz::kDatasetSubdirs.size());
    for (const data::TextDataset& d : datasets) {
      FP8KIT_FUZZ_ASSERT(d.texts.size() == d.labels.size() && d.texts.size() == d.paths.size());
      for (size_t i = 0; i < d.texts.size(); ++i) {
        FP8KIT_FUZZ_ASSERT(d.labels[i] >= 0 && static_cast<size_t>(d.labels[i]) < d.class_names.size());
        FP8KIT_FUZZ_ASSERT(text::is_valid_utf8(d.texts[i]));
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
