// `fp8kit vocab`: learning from a small generated aclImdb tarball or a generic class-folder dataset.
#include "common/temp_dir.h"
#include "data/archive_writer.h"
#include "run_cli.h"
#include "text/bpe_tokenizer.h"
#include "text/vocab_file.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace fp8kit {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class VocabCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<testing::TreeEntry> entries;
    for (const char* split : {"train", "test"}) {
      for (const char* label : {"neg", "pos"}) {
        for (int i = 0; i < 20; ++i) {
          entries.push_back({fmt::format("aclImdb/{}/{}/{}_1.txt", split, label, i),
                             fmt::format("The movie was {} , Really {}!", label, i % 3 ? "GOOD" : "bad")});
        }
      }
    }
    testing::write_tar_gz(dir_ / "aclImdb_v1.tar.gz", entries);
  }
  const testing::TempDir dir_{"vocab_cli"};
};

TEST_F(VocabCli, LearnsFromAnImdbTarball) {
  const auto r = testing::run_cli(fmt::format("vocab --data '{}' --size 40 --out '{}'", (dir_ / "aclImdb_v1.tar.gz").string(),
                                              (dir_ / "vocab.txt").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("from 32 texts"));  // 80% of the 40 training reviews
  const auto vocab = text::read_vocab(dir_ / "vocab.txt");
  EXPECT_LE(vocab.size(), 40u);
  EXPECT_THAT(std::vector<std::string>(vocab.begin(), vocab.begin() + 3), ElementsAre("[PAD]", "[UNK]", "!"));
  EXPECT_EQ(std::count(vocab.begin(), vocab.end(), "G"), 0);  // lowercased
}

TEST_F(VocabCli, ReservedTokensAndGenericDatasets) {
  const auto r = testing::run_cli(fmt::format("vocab --data '{}' --subdir aclImdb/test --no-lowercase --size 50 "
                                              "--reserved '[PAD],[UNK],[CLS]' --out '{}'",
                                              (dir_ / "aclImdb_v1.tar.gz").string(), (dir_ / "v.txt").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto vocab = text::read_vocab(dir_ / "v.txt");
  EXPECT_THAT(std::vector<std::string>(vocab.begin(), vocab.begin() + 3), ElementsAre("[PAD]", "[UNK]", "[CLS]"));
  EXPECT_EQ(std::count(vocab.begin(), vocab.end(), "G"), 1);  // capitals kept
}

TEST_F(VocabCli, CountsASingleTextAsOne) {
  fs::create_directories(dir_ / "one" / "pos");
  std::ofstream(dir_ / "one" / "pos" / "0.txt") << "a good film";
  const auto r = testing::run_cli(fmt::format("vocab --data '{}' --subdir one --validation-split 0 --out '{}'",
                                              dir_.path().string(), (dir_ / "v.txt").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("from 1 text in"));
}

TEST_F(VocabCli, BadArgumentsFailWithAMessage) {
  auto r = testing::run_cli(fmt::format("vocab --data '{}'", (dir_ / "aclImdb_v1.tar.gz").string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;  // --out is required
  r = testing::run_cli(fmt::format("vocab --data '{}' --out '{}'", (dir_ / "missing.tar.gz").string(),
                                   (dir_ / "v.txt").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("error: IMDB data path"));
  r = testing::run_cli(fmt::format("vocab --data '{}' --reserved '[PAD],,[UNK]' --out '{}'",
                                   (dir_ / "aclImdb_v1.tar.gz").string(), (dir_ / "v.txt").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("empty token"));
  EXPECT_FALSE(fs::exists(dir_ / "v.txt"));
}

// What a command printed before it failed comes first, whole lines, and the error is the last line,
// also when stdout is a pipe or file (buffered) and stderr goes to the same place.
TEST_F(VocabCli, ErrorComesAfterWhatWasPrinted) {
  std::ofstream(dir_ / "empty.tar.gz").flush();
  const auto r = testing::run_cli(fmt::format("vocab --data '{}' --out '{}'", (dir_ / "empty.tar.gz").string(),
                                              (dir_ / "v.txt").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output.rfind("data: ", 0), 0u) << r.output;
  const size_t error = r.output.find("\nerror: ");
  ASSERT_NE(error, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n', error + 1), r.output.size() - 1) << r.output;
}

// --reserved and --size that would give a vocab.txt read_vocab or the tokenizer refuses fail before
// the data is read (the data path here does not exist) and write nothing.
TEST_F(VocabCli, RefusesReservedTokensItsReadersWouldReject) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--reserved '[PAD],[UNK],[PAD]'", "error: --reserved lists \"[PAD]\" twice (tokens 1 and 3); list each token once"},
      {"--reserved \"[PAD],$(printf '\\377'),[UNK]\"", "error: --reserved: token 2 is not valid UTF-8"},
      {"--reserved \"[PAD],[UNK],$(printf 'a\\rb')\"", "error: --reserved: token 3 contains a line break"},
      {"--reserved '[PAD],[UNK],'", "error: --reserved \"[PAD],[UNK],\" has an empty token"},
      {"--reserved ''", "error: --reserved must include [UNK], the token the tokenizer gives unknown words"},
      {"--reserved '[PAD],[OOV]'", "error: --reserved must include [UNK]"},
      {"--reserved '[PAD],[UNK],[CLS]' --size 3", "error: --size 3 leaves no room for learned tokens after the 3 reserved"},
  };
  for (const auto& [options, message] : cases) {
    const auto r = testing::run_cli(fmt::format("vocab --data '{}' {} --out '{}'", (dir_ / "missing.tar.gz").string(),
                                                options, (dir_ / "v.txt").string()));
    EXPECT_EQ(r.exit_code, 1) << options << "\n" << r.output;
    EXPECT_EQ(r.output.rfind(message, 0), 0u) << options << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(dir_ / "v.txt"));
}


TEST_F(VocabCli, LearnsABpeTokenizerJson) {
  const auto r = testing::run_cli(fmt::format("vocab --kind bpe --data '{}' --size 300 --out '{}'",
                                              (dir_ / "aclImdb_v1.tar.gz").string(), (dir_ / "tokenizer.json").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("from 32 texts"));
  const auto tokenizer = text::BpeTokenizer::load(dir_ / "tokenizer.json");
  EXPECT_LE(tokenizer.vocab_size(), 300);
  EXPECT_GT(tokenizer.model().merges.size(), 10u);
  EXPECT_EQ(tokenizer.eos_id(), 0);
  EXPECT_EQ(tokenizer.model().pattern, text::SplitPattern::kGpt2);
  // Case is kept: "GOOD" is learned, and no lowercase "good" (the texts have none).
  EXPECT_TRUE(tokenizer.token_id(" GOOD").has_value());
  EXPECT_FALSE(tokenizer.token_id(" good").has_value());
  const std::string text = "The movie was pos , Really GOOD!";
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
}

TEST_F(VocabCli, BpeSpecialTokensAndPattern) {
  const auto r = testing::run_cli(fmt::format("vocab --kind bpe --data '{}' --reserved '<s>,</s>' --pattern llama3 "
                                              "--size 270 --out '{}'",
                                              (dir_ / "aclImdb_v1.tar.gz").string(), (dir_ / "t.json").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto tokenizer = text::BpeTokenizer::load(dir_ / "t.json");
  EXPECT_EQ(tokenizer.vocab_size(), 270);
  EXPECT_EQ(tokenizer.token_id("<s>"), 0);
  EXPECT_EQ(tokenizer.token_id("</s>"), 1);
  EXPECT_EQ(tokenizer.model().pattern, text::SplitPattern::kLlama3);
  nlohmann::json j;
  std::ifstream(dir_ / "t.json") >> j;
  EXPECT_EQ(j["pre_tokenizer"]["type"], "Sequence");
}

// Options that cannot make a tokenizer fail before the data is read (the path does not exist).
TEST_F(VocabCli, RefusesBpeOptionsThatCannotWork) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--pattern llama3", "error: --pattern applies to --kind bpe only"},
      {"--kind bpe --size 200",
       "error: --size 200 is less than the 1 reserved tokens + 256 byte tokens every byte-level BPE has; give at least 257"},
      {"--kind bpe --reserved '<s>,<s>'", "error: --reserved lists \"<s>\" twice (tokens 1 and 2); list each token once"},
      {"--kind bpe --reserved \"<s>,$(printf '\\377')\"", "error: --reserved: token 2 is not valid UTF-8"},
  };
  for (const auto& [options, message] : cases) {
    const auto r = testing::run_cli(fmt::format("vocab --data '{}' {} --out '{}'", (dir_ / "missing.tar.gz").string(),
                                                options, (dir_ / "t.json").string()));
    EXPECT_EQ(r.exit_code, 1) << options << "\n" << r.output;
    EXPECT_EQ(r.output.rfind(message, 0), 0u) << options << "\n" << r.output;
  }
  const auto r = testing::run_cli(fmt::format("vocab --kind sentencepiece --out '{}'", (dir_ / "t.json").string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "t.json"));
}

}  // namespace
}  // namespace fp8kit
