// Shared by the fuzz targets and the seed corpus writer: the fixed state a fuzzed checkpoint is
// loaded into, the tokenizer's small vocabulary, and the file a target writes its input to.
#pragma once

#include "io/checkpoint.h"
#include "nn/parameter.h"
#include "text/bpe_models.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

// A property every input must keep; a broken one is a crash that libFuzzer saves as an artifact.
#define FP8KIT_FUZZ_ASSERT(cond)                                                               \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

namespace fp8kit::fuzz {

// The checkpoint target's model: a tiny dense layer and a step counter, and the metadata the load
// requires (so the requirement check is reached too).
struct CheckpointState {
  std::vector<float> kernel = std::vector<float>(6), bias = std::vector<float>(3), step = std::vector<float>(1);

  std::vector<nn::StateEntry> entries() {
    return {{"dense/kernel", {2, 3}, kernel}, {"dense/bias", {3}, bias}, {"step", {}, step}};
  }
};
inline const std::vector<io::MetadataRequirement> kCheckpointRequirements = {{"precision", "fp8", "--precision"}};

// The dataset target reads these dataset roots from the archive, as IMDB's train and test.
inline const std::vector<std::string> kDatasetSubdirs = {"train", "test"};

// The tokenizer target's vocabulary: specials, a few words, continuation pieces, punctuation, CJK.
inline std::vector<std::string> tokenizer_vocab() {
  return {"[PAD]", "[UNK]", "the", "movie", "great", "a", "b", "un", "##a", "##b", "##s", "##ing",
          "##ly",  "!",     ".",   "<",     ">",     "/", "br", "é", "##é", "日", "本"};
}

// The tokenizer target's byte-level BPE: the 256 bytes (id = byte), a few merges, "<|endoftext|>".
inline text::BpeModel bpe_model(text::SplitPattern pattern) {
  text::BpeModel model = testing::byte_model(
      {{"t", "h"}, {"th", "e"}, {" ", "the"}, {"e", "e"}, {"ee", "e"}, {"\xc3", "\xa9"}, {"1", "2"}}, pattern);
  model.tokens.push_back("<|endoftext|>");
  model.added_tokens = {{static_cast<int32_t>(model.tokens.size() - 1), true}};
  return model;
}

// A path whose file holds the input, for readers that take a path: an in-memory file (memfd, so no
// disk writes) reached as /proc/self/fd/N, one per `name`, rewritten for each input.
inline std::filesystem::path write_input(const char* name, const uint8_t* data, size_t size) {
  static std::map<std::string, int> files;
  auto [it, created] = files.try_emplace(name, -1);
  if (created) it->second = ::memfd_create(name, 0);
  const int fd = it->second;
  FP8KIT_FUZZ_ASSERT(fd >= 0 && ::ftruncate(fd, 0) == 0);
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    FP8KIT_FUZZ_ASSERT(n > 0);
    done += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace fp8kit::fuzz
