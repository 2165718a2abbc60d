// Finding, downloading and loading the aclImdb reviews, and the seed's vocabulary on them.
#include "data/imdb.h"

#include "base/error.h"
#include "data/split.h"
#include "text/vocab_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <vector>

namespace fp8kit::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTarballName = "aclImdb_v1.tar.gz";

// The enclosing git checkout of `dir`, if any.
std::optional<fs::path> git_root(fs::path dir) {
  std::error_code error;
  for (; !dir.empty(); dir = dir.parent_path()) {
    if (fs::exists(dir / ".git", error)) return dir;
    if (dir == dir.parent_path()) break;
  }
  return std::nullopt;
}

std::optional<fs::path> first_existing(const std::vector<fs::path>& candidates) {
  std::error_code error;
  for (const auto& candidate : candidates) {
    if (fs::exists(candidate, error)) return fs::weakly_canonical(candidate, error);
  }
  return std::nullopt;
}

// A single-quoted shell word.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// sha256 of a file, by the coreutils tool (fp8kit links no crypto library).
std::string sha256_of(const fs::path& file) {
  const std::string command = "sha256sum " + shell_quote(file.string()) + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  FP8KIT_CHECK(pipe != nullptr, "cannot run sha256sum to verify {}", file.string());
  char digest[65] = {};
  const size_t n = std::fread(digest, 1, 64, pipe);
  pclose(pipe);
  FP8KIT_CHECK(n == 64, "sha256sum failed on {}; is coreutils installed?", file.string());
  return std::string(digest, 64);
}

fs::path download_imdb(const fs::path& dir) {
  std::error_code error;
  std::vector<fs::path> made;  // the folders this download creates, deepest first
  for (fs::path p = dir; !p.empty() && !fs::exists(p, error); p = p.parent_path()) made.push_back(p);
  // A failed download leaves none of them (each removed only while empty).
  const auto remove_made = [&] {
    for (const fs::path& p : made) fs::remove(p, error);
  };
  fs::create_directories(dir, error);
  FP8KIT_CHECK(!error, "cannot create {} for the IMDB download: {}", dir.string(), error.message());
  const fs::path target = dir / kTarballName;
  const fs::path partial = dir / (std::string(kTarballName) + ".part");
  fmt::print(stderr, "IMDB data not found; downloading {} to {}\n", kImdbUrl, target.string());
  const std::string command =
      fmt::format("curl -fL --retry 3 --connect-timeout 30 -o {} {}", shell_quote(partial.string()), kImdbUrl);
  const int raw_status = std::system(command.c_str());
  const int status = raw_status != -1 && WIFEXITED(raw_status) ? WEXITSTATUS(raw_status) : -1;
  if (status != 0) {
    fs::remove(partial, error);
    remove_made();
    fail("could not find the IMDB data and the download failed (curl exit status {}). Download {} yourself "
         "(sha256 {}) and pass its path (--data PATH) or set FP8KIT_DATA to it",
         status, kImdbUrl, kImdbSha256);
  }
  const std::string digest = sha256_of(partial);
  if (digest != kImdbSha256) {
    fs::remove(partial, error);
    remove_made();
    fail("the downloaded {} has sha256 {}, expected {}: the download is corrupt; try again", kTarballName, digest,
         kImdbSha256);
  }
  fs::rename(partial, target, error);
  FP8KIT_CHECK(!error, "cannot move the download to {}: {}", target.string(), error.message());
  return target;
}

}  // namespace

fs::path find_imdb(const std::optional<fs::path>& user_path) {
  std::error_code error;
  if (user_path) {
    FP8KIT_CHECK(!user_path->empty(), "the IMDB data path is empty: pass {} or its extracted aclImdb folder",
                 kTarballName);
    FP8KIT_CHECK(fs::exists(*user_path, error), "IMDB data path {} does not exist: pass {} or its extracted aclImdb folder",
                 user_path->string(), kTarballName);
    return *user_path;
  }
  std::vector<fs::path> candidates;
  const char* env = std::getenv("FP8KIT_DATA");
  if (env && *env) {
    const fs::path data = env;
    if (fs::is_regular_file(data, error)) return data;
    candidates.push_back(data / kTarballName);
    candidates.push_back(data / "aclImdb");
  }
  std::vector<fs::path> bases = {fs::current_path(error)};
  if (auto root = git_root(bases[0]); root && *root != bases[0]) bases.push_back(*root);
  for (const auto& base : bases) {
    candidates.push_back(base / "data" / kTarballName);
    candidates.push_back(base / "data" / "aclImdb");
    candidates.push_back(base / ".." / "shared" / "datasets" / kTarballName);
  }
  if (auto found = first_existing(candidates)) return *found;
  const fs::path download_dir = env && *env ? fs::path(env) : bases.back() / "data";
  return download_imdb(download_dir);
}

ImdbSplits load_imdb(const fs::path& path, const ImdbOptions& options) {
  std::error_code error;
  fs::path root = path;
  std::vector<std::string> subdirs = {"aclImdb/train", "aclImdb/test"};
  if (fs::is_directory(path, error)) {
    if (fs::is_directory(path / "train", error) || fs::is_directory(path / "test", error)) {
      subdirs = {"train", "test"};  // aclImdb itself (a missing one of the two is named)
    } else if (fs::is_regular_file(path / kTarballName, error) && !fs::is_directory(path / "aclImdb", error)) {
      root = path / kTarballName;
    }
  }
  TextDatasetOptions dataset_options;
  dataset_options.class_names = {"neg", "pos"};
  dataset_options.lowercase = options.lowercase;
  std::vector<TextDataset> folders = load_text_datasets(root, subdirs, dataset_options);
  const SplitIndices split =
      validation_split(static_cast<int64_t>(folders[0].texts.size()), options.validation_fraction, options.seed);
  ImdbSplits splits;
  splits.train = select(folders[0], split.train);
  splits.validation = select(folders[0], split.validation);
  splits.test = std::move(folders[1]);
  return splits;
}

std::optional<std::vector<std::string>> read_imdb_vocabulary(const fs::path& path,
                                                             const text::WordPieceLearnerOptions& options,
                                                             VocabularyFile kind) {
  std::error_code error;
  if (!fs::exists(path, error)) return std::nullopt;
  std::vector<std::string> vocab = text::read_vocab(path);
  for (size_t i = 0; i < options.reserved_tokens.size(); ++i) {
    if (i < vocab.size() && vocab[i] == options.reserved_tokens[i]) continue;
    const std::string found = i < vocab.size() ? fmt::format("has \"{}\" at id {}", vocab[i], i)
                                               : fmt::format("ends after {} tokens", vocab.size());
    if (kind == VocabularyFile::Cache) {
      fail("cached vocabulary {} {} where the reserved token {} belongs: delete it to relearn", path.string(), found,
           options.reserved_tokens[i]);
    }
    fail("vocabulary {} {} where the reserved token {} belongs: pass a vocabulary whose first lines are the reserved "
         "tokens {} (ids 0 to {}), or pick a --vocab path that does not exist yet to learn a new one there",
         path.string(), found, options.reserved_tokens[i], fmt::join(options.reserved_tokens, ", "),
         options.reserved_tokens.size() - 1);
  }
  return vocab;
}

std::vector<std::string> imdb_vocabulary(const ImdbSplits& splits, const std::optional<fs::path>& cache,
                                         const text::WordPieceLearnerOptions& options, VocabularyFile kind) {
  if (cache) {
    if (auto vocab = read_imdb_vocabulary(*cache, options, kind)) return *std::move(vocab);
  }
  std::error_code error;
  std::vector<std::string> vocab = text::learn_wordpiece_vocab(std::span<const std::string>(splits.train.texts), options);
  if (cache) {
    if (cache->has_parent_path()) fs::create_directories(cache->parent_path(), error);
    text::write_vocab(*cache, vocab);
  }
  return vocab;
}

}  // namespace fp8kit::data
