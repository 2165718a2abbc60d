// Fuzz target: the pre-tokenizer on any bytes (words are non-empty views in order inside the input),
// the WordPiece tokenizer with a small fixed vocabulary on the input made valid UTF-8 (ids in the
// vocabulary, padded or truncated to the asked length, detokenized without error), and byte-level
// BPE on the raw bytes (each split pattern's pieces cover the input; a small tokenizer of each
// pattern encodes it to ids that decode back to it).
#include "fuzz_support.h"
#include "text/bpe_tokenizer.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"
#include "text/wordpiece_tokenizer.h"

#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fp8kit;
  static const text::WordPieceTokenizer tokenizer(fuzz::tokenizer_vocab());
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  const char* end_of_last = bytes.data();
  for (std::string_view word : text::pre_tokenize(bytes)) {
    FP8KIT_FUZZ_ASSERT(!word.empty() && word.data() >= end_of_last && word.data() + word.size() <= bytes.data() + size);
    end_of_last = word.data() + word.size();
  }

  const std::string text = text::decode_utf8_lossy(bytes);
  const auto vocab_size = static_cast<int32_t>(tokenizer.vocab().size());
  for (int32_t id : tokenizer.encode(text)) FP8KIT_FUZZ_ASSERT(id >= 0 && id < vocab_size);
  const std::vector<int32_t> ids = tokenizer.encode(text, 16);
  FP8KIT_FUZZ_ASSERT(ids.size() == 16);
  tokenizer.detokenize(ids);

  static const text::BpeTokenizer bpe[] = {text::BpeTokenizer(fuzz::bpe_model(text::SplitPattern::kGpt2)),
                                           text::BpeTokenizer(fuzz::bpe_model(text::SplitPattern::kLlama3))};
  for (const text::BpeTokenizer& byte_level : bpe) {
    size_t covered = 0;
    for (std::string_view piece : text::split_pieces(bytes, byte_level.model().pattern)) {
      FP8KIT_FUZZ_ASSERT(!piece.empty() && piece.data() == bytes.data() + covered);
      covered += piece.size();
    }
    FP8KIT_FUZZ_ASSERT(covered == size);
    const std::vector<int32_t> bpe_ids = byte_level.encode(bytes);
    for (int32_t id : bpe_ids) FP8KIT_FUZZ_ASSERT(id >= 0 && id < byte_level.vocab_size());
    FP8KIT_FUZZ_ASSERT(byte_level.decode(bpe_ids) == bytes);
  }
  return 0;
}
