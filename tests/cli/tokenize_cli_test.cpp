// `fp8kit tokenize`: ids, padding and detokenized text as the seed prints them.
#include "common/temp_dir.h"
#include "run_cli.h"
#include "text/bpe_models.h"
#include "text/vocab_file.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

namespace fp8kit {
namespace {

using ::testing::HasSubstr;

TEST(TokenizeCli, PrintsIdsAndDetokenizedText) {
  const testing::TempDir dir("tokenize_cli");
  text::write_vocab(dir / "vocab.txt", {"[PAD]", "[UNK]", "\"", ".", "the", "qu", "##ick", "fox"});
  const auto r = testing::run_cli(
      fmt::format("tokenize --vocab '{}' --sequence-length 8 'the quick \"fox\".' 'The fox'", (dir / "vocab.txt").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "Sentence: the quick \"fox\".\n"
            "Tokens: 4 5 6 2 7 2 3 0\n"
            "Recovered text after detokenizing: the quick \" fox \" . [PAD]\n"
            "Sentence: The fox\n"
            "Tokens: 1 7 0 0 0 0 0 0\n"
            "Recovered text after detokenizing: [UNK] fox [PAD] [PAD] [PAD] [PAD] [PAD] [PAD]\n");
  const auto lower = testing::run_cli(
      fmt::format("tokenize --vocab '{}' --lowercase --sequence-length 0 'The fox'", (dir / "vocab.txt").string()));
  EXPECT_THAT(lower.output, HasSubstr("Tokens: 4 7\n"));
}

TEST(TokenizeCli, BadVocabulariesFailWithAMessage) {
  const testing::TempDir dir("tokenize_cli_bad");
  text::write_vocab(dir / "no_unk.txt", {"[PAD]", "a"});
  auto r = testing::run_cli(fmt::format("tokenize --vocab '{}' a", (dir / "no_unk.txt").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("error: the unknown token \"[UNK]\" is not in the vocabulary"));
  r = testing::run_cli(fmt::format("tokenize --vocab '{}' a", (dir / "missing.txt").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("cannot open vocabulary file"));
}

// A device, pipe or folder is refused before reading (/dev/zero would be read forever), and so is
// a token line longer than any WordPiece token.
TEST(TokenizeCli, RefusesWhatIsNoVocabFile) {
  const testing::TempDir dir("tokenize_cli_not_vocab");
  for (const std::string& path : std::vector<std::string>{"/dev/null", "/dev/zero", dir.path().string()}) {
    const auto r = testing::run_cli(fmt::format("tokenize --vocab '{}' a", path));
    EXPECT_EQ(r.exit_code, 1) << path;
    EXPECT_EQ(r.output, fmt::format("error: vocabulary file {} is not a regular file (a folder, device or pipe); give "
                                    "a vocab.txt with one token per line\n", path));
  }
  std::ofstream(dir / "long.txt") << "[PAD]\n[UNK]\n" << std::string(5000, 'a') << "\n";
  const auto r = testing::run_cli(fmt::format("tokenize --vocab '{}' a", (dir / "long.txt").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("long.txt:3: the token has 5000 bytes, more than the 1024"));
}


class TokenizeBpeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    // The bytes are ids 0-255; "th" 256, "the" 257, " the" 258; "<|endoftext|>" 259.
    text::BpeModel model = testing::byte_model({{"t", "h"}, {"th", "e"}, {" ", "the"}});
    model.tokens.push_back("<|endoftext|>");
    model.added_tokens = {{259, true}};
    text::BpeTokenizer(model).save(dir_ / "tokenizer.json");
  }
  std::string run(const std::string& arguments) const {
    const auto r = testing::run_cli(fmt::format("tokenize --tokenizer '{}' {}", (dir_ / "tokenizer.json").string(), arguments));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  }
  const testing::TempDir dir_{"tokenize_bpe_cli"};
};

TEST_F(TokenizeBpeCli, PrintsIdsPiecesAndDecodedText) {
  EXPECT_EQ(run("'the the x' 'a\tb'"),
            "Sentence: the the x\n"
            "Tokens: 257 258 32 120\n"
            "Pieces: the Ġthe Ġ x\n"
            "Recovered text after detokenizing: the the x\n"
            "Sentence: a\tb\n"
            "Tokens: 97 9 98\n"
            "Pieces: a ĉ b\n"
            "Recovered text after detokenizing: a\tb\n");
  EXPECT_THAT(run("--sequence-length 2 'the the x'"), HasSubstr("Tokens: 257 258\n"));
  EXPECT_THAT(run("--lowercase 'THE'"), HasSubstr("Tokens: 257\n"));
  // Added tokens are plain text unless --special.
  EXPECT_THAT(run("'the<|endoftext|>'"), HasSubstr("Tokens: 257 60 124 101 110 100 111 102 116 101 120 116 124 62\n"));
  EXPECT_THAT(run("--special 'the<|endoftext|>'"), HasSubstr("Tokens: 257 259\nPieces: the <|endoftext|>\n"));
  // Any bytes round-trip.
  EXPECT_THAT(run("\"$(printf 'a\\377b')\""), HasSubstr("Tokens: 97 255 98\n"));
}

TEST_F(TokenizeBpeCli, BadArgumentsFailWithAMessage) {
  auto r = testing::run_cli("tokenize a");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output, "error: give --vocab vocab.txt (WordPiece) or --tokenizer tokenizer.json (byte-level BPE)\n");
  r = testing::run_cli(fmt::format("tokenize --tokenizer '{}' a", (dir_ / "missing.json").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output, fmt::format("error: cannot open tokenizer file {}: check the path\n", (dir_ / "missing.json").string()));
  text::write_vocab(dir_ / "vocab.txt", {"[PAD]", "[UNK]"});
  r = testing::run_cli(fmt::format("tokenize --tokenizer '{}' a", (dir_ / "vocab.txt").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("vocab.txt: not a valid tokenizer.json: "));
  r = testing::run_cli(fmt::format("tokenize --tokenizer '{}' --vocab '{}' a", (dir_ / "tokenizer.json").string(),
                                   (dir_ / "vocab.txt").string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;  // one or the other
  r = testing::run_cli(fmt::format("tokenize --vocab '{}' --special a", (dir_ / "vocab.txt").string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;  // --special is for --tokenizer
}

}  // namespace
}  // namespace fp8kit
