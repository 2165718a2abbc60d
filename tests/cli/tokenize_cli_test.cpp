// `fp8kit tokenize`: ids, padding and detokenized text as the seed prints them.
#include "common/temp_dir.h"
#include "run_cli.h"
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

}  // namespace
}  // namespace fp8kit
