// `fp8kit tokenize`: WordPiece token ids of each TEXT with a vocab.txt, padded or truncated to the
// sequence length, and the detokenized text, as the seed example prints them.
#include "base/error.h"
#include "cli/command.h"
#include "cli/options.h"
#include "text/utf8.h"
#include "text/vocab_file.h"
#include "text/wordpiece_tokenizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace fp8kit::cli {
namespace {

struct Options {
  std::string vocab;
  int64_t sequence_length = 200;
  bool lowercase = false;
  std::vector<std::string> texts;
};

void run(const Options& o) {
  const text::WordPieceTokenizer tokenizer(text::read_vocab(o.vocab));
  for (const std::string& raw : o.texts) {
    std::string sentence = text::decode_utf8_lossy(raw);
    if (o.lowercase) text::ascii_lowercase(sentence);
    const std::vector<int32_t> ids =
        o.sequence_length > 0 ? tokenizer.encode(sentence, o.sequence_length) : tokenizer.encode(sentence);
    fmt::print("Sentence: {}\n", sentence);
    fmt::print("Tokens: {}\n", fmt::join(ids, " "));
    fmt::print("Recovered text after detokenizing: {}\n", tokenizer.detokenize(ids));
  }
}

void setup(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--vocab", o->vocab, "vocab.txt (one token per line; must contain [UNK])")
      ->required()
      ->check(non_empty_path());
  app.add_option("--sequence-length", o->sequence_length, "pad with id 0 or truncate to this length; 0 = neither")
      ->capture_default_str()
      ->check(whole_number(0, 1'000'000));
  app.add_flag("--lowercase", o->lowercase, "lowercase ASCII first (the seed lowercases its data beforehand)");
  app.add_option("TEXT", o->texts, "texts to tokenize")->required();
  app.callback([o] { run(*o); });
}

const bool registered = register_command({"tokenize", "WordPiece token ids and detokenized text of each TEXT", setup});

}  // namespace
}  // namespace fp8kit::cli
