// The IMDB reviews of the seed experiment (aclImdb): finding or downloading the data, and loading
// the train / validation / test splits exactly as the Keras example does.
#pragma once

#include "data/text_dataset.h"
#include "text/wordpiece_learner.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fp8kit::data {

inline constexpr const char* kImdbUrl = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz";
// sha256 of the official tarball (84 MB, with train/unsup).
inline constexpr const char* kImdbSha256 = "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe";

// Where the IMDB data is: `user_path` if given (a .tar.gz or an extracted aclImdb directory; it
// must exist, and an empty path is an error); else the first existing copy among $FP8KIT_DATA (a file, or a directory holding
// aclImdb_v1.tar.gz or aclImdb/), data/, and ../shared/datasets/aclImdb_v1.tar.gz, each tried
// relative to the current directory and to the enclosing git checkout; else downloads the official
// tarball with curl into $FP8KIT_DATA or data/ and verifies its sha256. Throws with a message
// saying what to do when nothing is found and the download fails.
std::filesystem::path find_imdb(const std::optional<std::filesystem::path>& user_path = std::nullopt);

struct ImdbOptions {
  bool lowercase = true;             // ASCII lowercasing, as the seed's tf.strings.lower
  double validation_fraction = 0.2;  // of the 25,000 training reviews
  uint32_t seed = 42;                // of the validation split
};

// The three splits, each with class_names {"neg", "pos"} (labels 0, 1).
struct ImdbSplits {
  TextDataset train;       // 20,000 reviews: the first 80% of the shuffled train folder, in that order
  TextDataset validation;  // 5,000 reviews: the rest
  TextDataset test;        // 25,000 reviews of the test folder, neg then pos, sorted by file name
};

// Loads aclImdb from a .tar.gz (one pass over the archive for both folders) or from a directory
// (either aclImdb itself or its parent). train/unsup and the other files are ignored.
ImdbSplits load_imdb(const std::filesystem::path& path, const ImdbOptions& options = {});

// Whose is the vocabulary file imdb_vocabulary reads or writes: fp8kit's own cache, which a bad copy
// may be deleted from to relearn it, or the user's (--vocab), which is only ever read or created.
enum class VocabularyFile { Cache, User };

// The vocabulary file at `path` when one exists, checked to start with the reserved tokens (the
// error says how to fix it as `kind` allows); nullopt when there is none yet. Reads nothing else, so
// a bad file fails before the data is loaded.
std::optional<std::vector<std::string>> read_imdb_vocabulary(const std::filesystem::path& path,
                                                             const text::WordPieceLearnerOptions& options = {},
                                                             VocabularyFile kind = VocabularyFile::Cache);

// The seed's vocabulary: learned on splits.train with the seed's settings (size 20,000, reserved
// [PAD], [UNK]). When `cache` is given and exists it is read instead (and checked to start with the
// reserved tokens; the error says how to fix it as `kind` allows); when it does not exist the learned
// vocabulary is written there.
std::vector<std::string> imdb_vocabulary(const ImdbSplits& splits,
                                         const std::optional<std::filesystem::path>& cache = std::nullopt,
                                         const text::WordPieceLearnerOptions& options = {},
                                         VocabularyFile kind = VocabularyFile::Cache);

}  // namespace fp8kit::data
