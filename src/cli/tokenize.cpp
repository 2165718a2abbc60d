// `fp8kit tokenize`: WordPiece token ids of each TEXT with a vocab.txt, padded or truncated to the
// sequence length, and the detokenized text, as the seed example prints them; or, with --tokenizer,
// the byte-level BPE ids and tokens of each TEXT with a tokenizer.json, and the decoded bytes.
#include "base/error.h"
#include "cli/command.h"
#include "cli/options.h"
#include "text/bpe_tokenizer.h"
#include "text/byte_level.h"
#include "text/utf8.h"
#include "text/vocab_file.h"
#include "text/wordpiece_tokenizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace fp8kit::cli {
namespace {

struct Options {
  std::string vocab;
  std::string tokenizer;
  int64_t sequence_length = 200;
  bool sequence_length_given = false;
  bool lowercase = false;
  bool special = false;
  std::vector<std::string> texts;
};

void run_wordpiece(const Options& o) {
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

// The text is encoded as given, bytes and all; tokens are printed in their tokenizer.json spelling
// (a space is "Ġ"), so each is one printable word.
void run_bpe(const Options& o) {
  const text::BpeTokenizer tokenizer = text::BpeTokenizer::load(o.tokenizer);
  const auto special = o.special ? text::SpecialTokens::kParse : text::SpecialTokens::kAsText;
  for (std::string sentence : o.texts) {
    if (o.lowercase) text::ascii_lowercase(sentence);
    std::vector<int32_t> ids = tokenizer.encode(sentence, special);
    if (o.sequence_length_given && o.sequence_length > 0 && static_cast<int64_t>(ids.size()) > o.sequence_length) {
      ids.resize(o.sequence_length);
    }
    std::vector<std::string> tokens;
    for (const int32_t id : ids) tokens.push_back(text::to_byte_level(tokenizer.token_bytes(id)));
    fmt::print("Sentence: {}\n", sentence);
    fmt::print("Tokens: {}\n", fmt::join(ids, " "));
    fmt::print("Pieces: {}\n", fmt::join(tokens, " "));
    fmt::print("Recovered text after detokenizing: {}\n", tokenizer.decode(ids));
  }
}

void setup(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::Option* vocab = app.add_option("--vocab", o->vocab, "vocab.txt (one token per line; must contain [UNK])")
                           ->check(non_empty_path());
  CLI::Option* tokenizer =
      app.add_option("--tokenizer", o->tokenizer, "a byte-level BPE tokenizer.json (fp8kit vocab --kind bpe, GPT-2, Llama 3)")
          ->check(non_empty_path())
          ->excludes(vocab);
  CLI::Option* length =
      app.add_option("--sequence-length", o->sequence_length,
                     "pad with id 0 or truncate to this length; 0 = neither (with --tokenizer: truncate, only when given)")
          ->capture_default_str()
          ->check(whole_number(0, 1'000'000));
  app.add_flag("--lowercase", o->lowercase, "lowercase ASCII first (the seed lowercases its data beforehand)");
  app.add_flag("--special", o->special, "with --tokenizer: read added tokens such as <|endoftext|> in TEXT as themselves")
      ->needs(tokenizer);
  app.add_option("TEXT", o->texts, "texts to tokenize")->required();
  app.callback([o, vocab, tokenizer, length] {
    FP8KIT_CHECK(vocab->count() > 0 || tokenizer->count() > 0,
                 "give --vocab vocab.txt (WordPiece) or --tokenizer tokenizer.json (byte-level BPE)");
    o->sequence_length_given = length->count() > 0;
    if (tokenizer->count() > 0) return run_bpe(*o);
    run_wordpiece(*o);
  });
}

const bool registered =
    register_command({"tokenize", "Token ids and detokenized text of each TEXT (WordPiece vocab.txt or BPE tokenizer.json)", setup});

}  // namespace
}  // namespace fp8kit::cli
