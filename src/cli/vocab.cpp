// `fp8kit vocab`: learns a WordPiece vocabulary (TF Text's algorithm) and writes it as vocab.txt, or
// with --kind bpe a byte-level BPE tokenizer written as a Hugging Face tokenizer.json. By default on
// the seed's data: the 20,000 IMDB training reviews of the seed-42 split (lowercased for WordPiece).
#include "base/error.h"
#include "cli/command.h"
#include "cli/options.h"
#include "data/imdb.h"
#include "data/split.h"
#include "text/bpe_learner.h"
#include "text/utf8.h"
#include "text/vocab_file.h"
#include "text/wordpiece_learner.h"
#include "text/wordpiece_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <sstream>

namespace fp8kit::cli {
namespace {

namespace fs = std::filesystem;

struct Options {
  std::string kind = "wordpiece";
  std::string data;
  std::string subdir;
  int64_t size = 0;      // 0: the kind's default
  std::string reserved;  // "": the kind's default
  bool reserved_given = false;
  std::string pattern;
  std::string out;
  bool no_lowercase = false;
  double validation_split = 0.2;
  uint32_t seed = 42;
};

constexpr const char* kWordPieceReserved = "[PAD],[UNK]";
constexpr int64_t kWordPieceSize = 20000, kBpeSize = 8192;

// The tokens of --reserved: each non-empty, none repeated, and each one that `token_problem` (the
// kind's own rule) accepts.
std::vector<std::string> split_reserved(const std::string& list, const std::string& example,
                                        std::string (*token_problem)(std::string_view)) {
  std::vector<std::string> items;
  std::stringstream stream(list);
  for (std::string item; std::getline(stream, item, ',');) items.push_back(item);
  if (list.ends_with(',')) items.emplace_back();  // getline drops a last empty item
  for (size_t i = 0; i < items.size(); ++i) {
    FP8KIT_CHECK(!items[i].empty(), "--reserved \"{}\" has an empty token; write e.g. \"{}\"", list, example);
    const std::string problem = token_problem(items[i]);
    FP8KIT_CHECK(problem.empty(), "--reserved: token {} {}; write a comma-separated list such as \"{}\"", i + 1, problem,
                 example);
    const auto first = std::find(items.begin(), items.begin() + i, items[i]);
    FP8KIT_CHECK(first == items.begin() + i, "--reserved lists \"{}\" twice (tokens {} and {}); list each token once",
                 items[i], first - items.begin() + 1, i + 1);
  }
  return items;
}

// The reserved tokens of --reserved, refused unless the vocabulary they start is one that
// read_vocab and the tokenizer accept: each a vocab.txt token, none repeated, [UNK] among them.
std::vector<std::string> reserved_tokens(const std::string& list) {
  const std::vector<std::string> items = split_reserved(list, kWordPieceReserved, text::vocab_token_problem);
  const text::WordPieceTokenizerOptions tokenizer;
  FP8KIT_CHECK(std::find(items.begin(), items.end(), tokenizer.unknown_token) != items.end(),
               "--reserved must include {}, the token the tokenizer gives unknown words, e.g. \"[PAD],{}\"",
               tokenizer.unknown_token, tokenizer.unknown_token);
  return items;
}

// The training texts: IMDB's training split, or the training part of a generic class-folder dataset.
std::vector<std::string> training_texts(const Options& o) {
  if (o.subdir.empty()) {
    const fs::path path = data::find_imdb(o.data.empty() ? std::nullopt : std::optional<fs::path>(o.data));
    data::ImdbOptions imdb;
    imdb.lowercase = !o.no_lowercase && o.kind == "wordpiece";
    imdb.validation_fraction = o.validation_split;
    imdb.seed = o.seed;
    fmt::print("data: {}\n", path.string());
    return std::move(data::load_imdb(path, imdb).train.texts);
  }
  FP8KIT_CHECK(!o.data.empty(), "--subdir needs --data PATH (a directory or .tar.gz holding it)");
  data::TextDatasetOptions options;
  options.lowercase = !o.no_lowercase && o.kind == "wordpiece";
  data::TextDataset all = data::load_text_dataset(o.data, o.subdir, options);
  const auto split = data::validation_split(static_cast<int64_t>(all.texts.size()), o.validation_split, o.seed);
  return std::move(data::select(all, split.train).texts);
}

double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// "1 text", "32 texts".
std::string count_of_texts(const std::vector<std::string>& texts) {
  return fmt::format("{} text{}", texts.size(), texts.size() == 1 ? "" : "s");
}

// --kind bpe: special tokens get ids 0, 1, ... (tokenizer.json holds them as text, so valid UTF-8).
void run_bpe(const Options& o) {
  text::BpeLearnerOptions learner;
  learner.vocab_size = o.size > 0 ? o.size : kBpeSize;
  if (o.reserved_given) {
    learner.special_tokens = o.reserved.empty() ? std::vector<std::string>{}
                                                : split_reserved(o.reserved, "<|endoftext|>", [](std::string_view token) {
                                                    return text::is_valid_utf8(token) ? std::string()
                                                                                      : std::string("is not valid UTF-8");
                                                  });
  }
  learner.pattern = *text::split_pattern_from_name(o.pattern.empty() ? "gpt2" : o.pattern);
  const auto fixed = static_cast<int64_t>(learner.special_tokens.size()) + 256;
  FP8KIT_CHECK(learner.vocab_size >= fixed,
               "--size {} is less than the {} reserved tokens + 256 byte tokens every byte-level BPE has; give at least {}",
               learner.vocab_size, learner.special_tokens.size(), fixed);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> texts = training_texts(o);
  const auto loaded = std::chrono::steady_clock::now();
  const text::BpeTokenizer tokenizer = text::learn_bpe(std::span<const std::string>(texts), learner);
  const auto learned = std::chrono::steady_clock::now();
  tokenizer.save(o.out);
  fmt::print("learned {} tokens ({} merges) from {} in {:.2f} s (loading {:.2f} s); wrote {}\n",
             tokenizer.vocab_size(), tokenizer.model().merges.size(), count_of_texts(texts), seconds(loaded, learned),
             seconds(start, loaded), o.out);
}

void run(const Options& o) {
  FP8KIT_CHECK(!fs::is_directory(o.out), "--out {} is a directory; give a file name such as {}", o.out,
               o.kind == "bpe" ? "tokenizer.json" : "vocab.txt");
  if (o.kind == "bpe") return run_bpe(o);
  FP8KIT_CHECK(o.pattern.empty(), "--pattern applies to --kind bpe only");
  const int64_t size = o.size > 0 ? o.size : kWordPieceSize;
  text::WordPieceLearnerOptions learner;
  learner.vocab_size = size;
  learner.reserved_tokens = reserved_tokens(o.reserved_given ? o.reserved : kWordPieceReserved);
  FP8KIT_CHECK(static_cast<int64_t>(learner.reserved_tokens.size()) < size,
               "--size {} leaves no room for learned tokens after the {} reserved ones; give a larger --size", size,
               learner.reserved_tokens.size());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> texts = training_texts(o);
  const auto loaded = std::chrono::steady_clock::now();
  const std::vector<std::string> vocab = text::learn_wordpiece_vocab(std::span<const std::string>(texts), learner);
  const auto learned = std::chrono::steady_clock::now();
  text::write_vocab(o.out, vocab);
  fmt::print("learned {} tokens from {} in {:.2f} s (loading {:.2f} s); wrote {}\n", vocab.size(),
             count_of_texts(texts), seconds(loaded, learned), seconds(start, loaded), o.out);
}

void setup(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--kind", o->kind, "wordpiece (vocab.txt, the seed's) or bpe (byte-level BPE, a Hugging Face tokenizer.json)")
      ->capture_default_str()
      ->check(CLI::IsMember({"wordpiece", "bpe"}));
  app.add_option("--data", o->data,
                 "aclImdb_v1.tar.gz or an extracted aclImdb folder (default: $FP8KIT_DATA, data/, "
                 "../shared/datasets/, else download)")
      ->check(non_empty_path());
  app.add_option("--subdir", o->subdir,
                 "read --data as a generic class-folder dataset rooted at this folder inside it (e.g. train)")
      ->check(non_empty_path());
  app.add_option("--size", o->size, "vocabulary size, reserved tokens included (default: 20000 for wordpiece, 8192 for bpe)")
      ->check(whole_number(2, 10'000'000));
  CLI::Option* reserved =
      app.add_option("--reserved", o->reserved,
                     "comma-separated reserved tokens, ids 0, 1, ...; wordpiece: must include [UNK] (id 0 pads), "
                     "default [PAD],[UNK]; bpe: special tokens, default <|endoftext|>");
  app.add_option("--pattern", o->pattern, "bpe: the pre-tokenizer's split, GPT-2's regex or Llama 3's (default gpt2)")
      ->check(CLI::IsMember({"gpt2", "llama3"}));
  app.add_option("--out", o->out, "output vocab.txt (one token per line), or tokenizer.json with --kind bpe")
      ->required()
      ->check(non_empty_path());
  app.add_flag("--no-lowercase", o->no_lowercase, "keep ASCII capitals (wordpiece lowercases as the seed; bpe keeps case)");
  app.add_option("--validation-split", o->validation_split, "fraction held out before learning")
      ->capture_default_str()
      ->check(real_number(0.0, 0.999));
  add_seed_option(app, o->seed, "seed of the validation split (numpy's, so below 2^32)");
  app.callback([o, reserved] {
    o->reserved_given = reserved->count() > 0;
    run(*o);
  });
}

const bool registered = register_command(
    {"vocab", "Learn a WordPiece vocabulary (vocab.txt) or a byte-level BPE tokenizer (tokenizer.json) from IMDB or a "
              "class-folder dataset", setup});

}  // namespace
}  // namespace fp8kit::cli
