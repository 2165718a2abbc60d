// vocab.txt reading and writing.
#include "text/vocab_file.h"

#include "base/error.h"
#include "common/read_text.h"
#include "common/temp_dir.h"
#include "common/error_of.h"

#include <gtest/gtest.h>

#include <fstream>

namespace fp8kit::text {
namespace {

using testing::error_of;

namespace fs = std::filesystem;

fs::path temp_file(const testing::TempDir& dir, const std::string& name, const std::string& contents) {
  const fs::path path = dir / name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

TEST(VocabFile, RoundTrip) {
  const std::vector<std::string> vocab = {"[PAD]", "[UNK]", "!", "é", "##ing", "日"};
  const testing::TempDir dir("vocab_file");
  const fs::path path = dir / "roundtrip.txt";
  write_vocab(path, vocab);
  EXPECT_EQ(read_vocab(path), vocab);
  EXPECT_EQ(testing::read_text(path), "[PAD]\n[UNK]\n!\né\n##ing\n日\n");  // BERT / Hugging Face layout
}

TEST(VocabFile, AcceptsCrlfAndAMissingFinalNewline) {
  const testing::TempDir dir("vocab_file");
  const auto path = temp_file(dir, "crlf.txt", "[PAD]\r\n[UNK]\r\nab");
  EXPECT_EQ(read_vocab(path), (std::vector<std::string>{"[PAD]", "[UNK]", "ab"}));
}

TEST(VocabFile, RejectsBadFiles) {
  EXPECT_THROW(read_vocab("/nonexistent/vocab.txt"), Error);
  const testing::TempDir dir("vocab_file");
  const auto empty = temp_file(dir, "empty.txt", "");
  const auto blank = temp_file(dir, "blank.txt", "a\n\nb\n");
  const auto duplicate = temp_file(dir, "dup.txt", "a\nb\na\n");
  const auto latin1 = temp_file(dir, "latin1.txt", "caf\xE9\n");
  for (const auto& path : {empty, blank, duplicate, latin1}) {
    EXPECT_THROW(read_vocab(path), Error) << path;
  }
  try {
    read_vocab(temp_file(dir, "dup2.txt", "a\nb\na\n"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(":3:"), std::string::npos) << e.what();  // names the line
  }
  const auto json = temp_file(dir, "tokenizer.json", "{\n  \"model\": {\n    \"type\": \"BPE\"\n  }\n}\n");
  EXPECT_NE(error_of([&] { read_vocab(json); }).find("tokenizer.json is JSON (a tokenizer.json?"), std::string::npos);
  EXPECT_EQ(read_vocab(temp_file(dir, "brace.txt", "{\n[UNK]\n}\n")).size(), 3u);  // braces as tokens stay tokens
  EXPECT_THROW(write_vocab(dir / "bad.txt", {"a\nb"}), Error);
  EXPECT_THROW(write_vocab("/nonexistent/dir/vocab.txt", {"a"}), Error);
}


TEST(VocabFile, RefusesNonRegularFilesAndBoundsSizeAndLines) {
  const testing::TempDir dir("vocab_file_bounds");
  for (const fs::path& path : {fs::path("/dev/null"), fs::path("/dev/zero"), dir.path()}) {
    EXPECT_NE(error_of([&] { read_vocab(path); }).find("is not a regular file"), std::string::npos) << path;
  }
  const fs::path big = dir / "big.txt";
  std::ofstream(big) << "[PAD]\n";
  fs::resize_file(big, kMaxVocabFileBytes + 1);  // sparse: cheap to make
  EXPECT_NE(error_of([&] { read_vocab(big); }).find("is larger than 64 MiB"), std::string::npos);
  const auto long_line = temp_file(dir, "long.txt", "a\n" + std::string(kMaxVocabTokenBytes + 1, 'b') + "\nc\n");
  EXPECT_NE(error_of([&] { read_vocab(long_line); }).find("long.txt:2: the token has 1025 bytes"), std::string::npos);
  const auto longest = temp_file(dir, "longest.txt", "a\n" + std::string(kMaxVocabTokenBytes, 'b') + "\n");
  EXPECT_EQ(read_vocab(longest).size(), 2u);
}

// write_vocab refuses, before creating the file, every vocabulary read_vocab would refuse.
TEST(VocabFile, WritesOnlyWhatItReadsBack) {
  const testing::TempDir dir("vocab_file_write");
  const fs::path path = dir / "vocab.txt";
  const std::vector<std::vector<std::string>> bad = {
      {}, {"a", ""}, {"a", "b\rc"}, {"caf\xE9"}, {"a", "b", "a"}, {std::string(kMaxVocabTokenBytes + 1, 'x')}};
  for (const auto& vocab : bad) {
    EXPECT_THROW(write_vocab(path, vocab), Error) << vocab.size();
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(dir / "vocab.txt.tmp"));
  }
  EXPECT_NE(error_of([&] { write_vocab(path, {"a", "b", "a"}); }).find("token \"a\" already appears on line 1"),
            std::string::npos);
}

}  // namespace
}  // namespace fp8kit::text
