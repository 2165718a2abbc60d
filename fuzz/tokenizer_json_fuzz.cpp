// Fuzz target: text::BpeTokenizer::load of a file holding the input. It either throws fp8kit::Error
// or gives a tokenizer that encodes any bytes (here: the input itself and a few fixed strings, with
// added tokens read as text and parsed) to ids in its vocabulary that decode back to those bytes.
#include "base/error.h"
#include "fuzz_support.h"
#include "text/bpe_tokenizer.h"

#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fp8kit;
  const auto path = fuzz::write_input("tokenizer.json", data, size);
  try {
    const text::BpeTokenizer tokenizer = text::BpeTokenizer::load(path);
    FP8KIT_FUZZ_ASSERT(tokenizer.vocab_size() >= 256);
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    for (const std::string_view text : {input.substr(0, 256), std::string_view("the movie's 1234 caf\xc3\xa9\xff \n\n x"),
                                        std::string_view("<|endoftext|>a<|end_of_text|>")}) {
      for (const auto special : {text::SpecialTokens::kAsText, text::SpecialTokens::kParse}) {
        const std::vector<int32_t> ids = tokenizer.encode(text, special);
        for (const int32_t id : ids) FP8KIT_FUZZ_ASSERT(id >= 0 && id < tokenizer.vocab_size());
        FP8KIT_FUZZ_ASSERT(tokenizer.decode(ids) == text);
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
