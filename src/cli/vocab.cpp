// `fp8kit vocab`: learns a WordPiece vocabulary (TF Text's algorithm) and writes it as vocab.txt.
// By default on the seed's data: the 20,000 lowercased IMDB training reviews of the seed-42 split.
#include "base/error.h"
#include "cli/command.h"
#include "data/imdb.h"
#include "data/split.h"
#include "text/vocab_file.h"
#include "text/wordpiece_learner.h"

#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <sstream>

namespace fp8kit::cli {
namespace {

namespace fs = std::filesystem;

struct Options {
  std::string data;
  std::string subdir;
  int64_t size = 20000;
  std::string reserved = "[PAD],[UNK]";
  std::string out;
  bool no_lowercase = false;
  double validation_split = 0.2;
  uint32_t seed = 42;
};

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream stream(list);
  for (std::string item; std::getline(stream, item, ',');) {
    FP8KIT_CHECK(!item.empty(), "--reserved \"{}\" has an empty token; write e.g. \"[PAD],[UNK]\"", list);
    items.push_back(item);
  }
  return items;
}

// The training texts: IMDB's training split, or the training part of a generic class-folder dataset.
std::vector<std::string> training_texts(const Options& o) {
  if (o.subdir.empty()) {
    const fs::path path = data::find_imdb(o.data.empty() ? std::nullopt : std::optional<fs::path>(o.data));
    data::ImdbOptions imdb;
    imdb.lowercase = !o.no_lowercase;
    imdb.validation_fraction = o.validation_split;
    imdb.seed = o.seed;
    fmt::print("data: {}\n", path.string());
    return std::move(data::load_imdb(path, imdb).train.texts);
  }
  FP8KIT_CHECK(!o.data.empty(), "--subdir needs --data PATH (a directory or .tar.gz holding it)");
  data::TextDatasetOptions options;
  options.lowercase = !o.no_lowercase;
  data::TextDataset all = data::load_text_dataset(o.data, o.subdir, options);
  const auto split = data::validation_split(static_cast<int64_t>(all.texts.size()), o.validation_split, o.seed);
  return std::move(data::select(all, split.train).texts);
}

void run(const Options& o) {
  FP8KIT_CHECK(!fs::is_directory(o.out), "--out {} is a directory; give a file name such as vocab.txt", o.out);
  text::WordPieceLearnerOptions learner;
  learner.vocab_size = o.size;
  learner.reserved_tokens = split_commas(o.reserved);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> texts = training_texts(o);
  const auto loaded = std::chrono::steady_clock::now();
  const std::vector<std::string> vocab = text::learn_wordpiece_vocab(std::span<const std::string>(texts), learner);
  const auto learned = std::chrono::steady_clock::now();
  text::write_vocab(o.out, vocab);
  const auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  fmt::print("learned {} tokens from {} texts in {:.2f} s (loading {:.2f} s); wrote {}\n", vocab.size(), texts.size(),
             seconds(loaded, learned), seconds(start, loaded), o.out);
}

void setup(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--data", o->data,
                 "aclImdb_v1.tar.gz or an extracted aclImdb folder (default: $FP8KIT_DATA, data/, "
                 "../shared/datasets/, else download)");
  app.add_option("--subdir", o->subdir,
                 "read --data as a generic class-folder dataset rooted at this folder inside it (e.g. train)");
  app.add_option("--size", o->size, "vocabulary size, reserved tokens included")->capture_default_str()->check(CLI::Range(1, 1 << 30));
  app.add_option("--reserved", o->reserved, "comma-separated reserved tokens, ids 0, 1, ...")->capture_default_str();
  app.add_option("--out", o->out, "output vocab.txt (one token per line)")->required();
  app.add_flag("--no-lowercase", o->no_lowercase, "keep ASCII capitals (the seed lowercases)");
  app.add_option("--validation-split", o->validation_split, "fraction held out before learning")
      ->capture_default_str()->check(CLI::Range(0.0, 0.999));
  app.add_option("--seed", o->seed, "seed of the validation split")->capture_default_str();
  app.callback([o] { run(*o); });
}

const bool registered = register_command({"vocab", "Learn a WordPiece vocabulary (vocab.txt) from IMDB or a class-folder dataset", setup});

}  // namespace
}  // namespace fp8kit::cli
