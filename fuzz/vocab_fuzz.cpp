// Fuzz target: text::read_vocab of a file holding the input. It either returns non-empty, unique,
// valid UTF-8 tokens without line breaks or throws fp8kit::Error.
#include "base/error.h"
#include "fuzz_support.h"
#include "text/utf8.h"
#include "text/vocab_file.h"

#include <set>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fp8kit;
  const auto path = fuzz::write_input("vocab.txt", data, size);
  try {
    const std::vector<std::string> vocab = text::read_vocab(path);
    FP8KIT_FUZZ_ASSERT(!vocab.empty());
    FP8KIT_FUZZ_ASSERT(std::set<std::string>(vocab.begin(), vocab.end()).size() == vocab.size());
    for (const std::string& token : vocab) {
      FP8KIT_FUZZ_ASSERT(!token.empty() && token.find('\n') == std::string::npos && text::is_valid_utf8(token));
    }
  } catch (const Error&) {
  }
  return 0;
}
