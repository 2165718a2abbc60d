// Shared by the text/data benchmarks: the real IMDB data ($FP8KIT_DATA or
// ../shared/datasets/aclImdb_v1.tar.gz next to the checkout), loaded once.
#pragma once

#include "data/imdb.h"

#include <cstdlib>
#include <optional>

namespace fp8kit::bench {

inline std::optional<std::filesystem::path> imdb_path() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("FP8KIT_DATA"); env && *env) {
    if (fs::is_regular_file(env)) return fs::path(env);
    if (fs::exists(fs::path(env) / "aclImdb_v1.tar.gz")) return fs::path(env) / "aclImdb_v1.tar.gz";
  }
  const auto shared = fs::path(FP8KIT_SOURCE_DIR) / ".." / "shared" / "datasets" / "aclImdb_v1.tar.gz";
  if (fs::exists(shared)) return shared;
  return std::nullopt;
}

// nullptr when the data is absent.
inline const data::ImdbSplits* imdb() {
  static const std::optional<data::ImdbSplits> splits = []() -> std::optional<data::ImdbSplits> {
    const auto path = imdb_path();
    if (!path) return std::nullopt;
    return data::load_imdb(*path);
  }();
  return splits ? &*splits : nullptr;
}

}  // namespace fp8kit::bench
