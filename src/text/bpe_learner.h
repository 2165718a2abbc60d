// Learning a byte-level BPE tokenizer from texts: count the pieces of the split pattern once, then
// repeatedly merge the most frequent adjacent pair of tokens, updating the pair counts of only the
// words that hold the merged pair.
#pragma once

#include "text/bpe_tokenizer.h"
#include "text/split_pattern.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fp8kit::text {

struct BpeLearnerOptions {
  int64_t vocab_size = 8192;  // the most tokens: special tokens + 256 bytes + one per merge
  std::vector<std::string> special_tokens = {"<|endoftext|>"};  // ids 0, 1, ..., then the bytes 0x00-0xFF
  SplitPattern pattern = SplitPattern::kGpt2;
  int64_t min_pair_count = 2;  // stop early when the most frequent pair occurs fewer times
};

// Learns merges from `texts` (any bytes) until the vocabulary has vocab_size tokens. The most
// frequent pair is merged first; ties go to the pair whose left token's bytes are
// lexicographically smallest, then its right token's. Merging a pair whose bytes are already a
// token reuses that token. The result does not depend on the thread count or the order of texts.
BpeTokenizer learn_bpe(std::span<const std::string> texts, const BpeLearnerOptions& options = {});

}  // namespace fp8kit::text
