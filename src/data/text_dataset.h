// Class-subdirectory text datasets (Keras text_dataset_from_directory): `root/<class>/**/*.txt`,
// read from a directory or straight from a .tar.gz (libarchive, nothing extracted to disk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fp8kit::data {

// One loaded dataset. Examples are ordered as Keras lists them: classes in sorted order, and in
// each class the files sorted by (directory, file name) byte-wise, so 0_3.txt < 10000_4.txt < 1_1.txt.
struct TextDataset {
  std::vector<std::string> class_names;  // label i is class_names[i]
  std::vector<std::string> texts;        // valid UTF-8 (invalid bytes replaced by U+FFFD)
  std::vector<int32_t> labels;           // [texts.size()], in [0, class_names.size())
  std::vector<std::string> paths;        // path of each file relative to the dataset root
  int64_t files_with_invalid_utf8 = 0;   // files in which bytes were replaced
  int64_t empty_files = 0;
};

struct TextDatasetOptions {
  // Classes to load, in label order; empty = every subdirectory of the root, sorted (a listed
  // class without a folder is an error; folders not listed, like IMDB's train/unsup, are skipped).
  std::vector<std::string> class_names;
  bool lowercase = false;  // ASCII-only lowercasing (tf.strings.lower)
  bool warn = true;        // print a warning to stderr for invalid UTF-8 and empty files
  int64_t max_file_bytes = int64_t{64} << 20;  // a larger .txt file is refused, not read
};

// Loads the dataset at `root`: a directory, or a .tar.gz / .tgz / .tar archive. `subdir` is the
// dataset root inside it ("aclImdb/train"), empty for the top. Bad input throws fp8kit::Error with
// a message saying what is wrong: a missing path, a FIFO, device or socket, a file that cannot be
// read or is no archive, a truncated or corrupt archive (a .tar.gz is read to its end, so gzip's
// CRC32 and length are checked), no class folders, a class folder without .txt files, a .txt file
// over max_file_bytes.
TextDataset load_text_dataset(const std::filesystem::path& root, const std::string& subdir = "",
                              const TextDatasetOptions& options = {});

// Loads several datasets from one source in a single pass over it (one read of an archive):
// result[i] is the dataset under subdirs[i].
std::vector<TextDataset> load_text_datasets(const std::filesystem::path& root,
                                            const std::vector<std::string>& subdirs,
                                            const TextDatasetOptions& options = {});

// The same from an archive's bytes in memory (a .tar.gz or .tar image), read as a file is;
// `name` stands for the image in messages.
std::vector<TextDataset> load_text_datasets_from_memory(std::span<const std::byte> image, const std::string& name,
                                                        const std::vector<std::string>& subdirs,
                                                        const TextDatasetOptions& options = {});

// The examples at `indices`, in that order (class names and counters copied).
TextDataset select(const TextDataset& dataset, std::span<const int64_t> indices);

}  // namespace fp8kit::data
