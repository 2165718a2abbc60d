// IMDB: locating the data, loading a small aclImdb-shaped archive, and the seed's real check
// (vocabulary ids and the tokenized example sentence) when the real data is present.
#include "data/imdb.h"

#include "archive_writer.h"
#include "base/error.h"
#include "common/temp_dir.h"
#include "text/wordpiece_tokenizer.h"
#include "common/error_of.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace fp8kit::data {
namespace {

using testing::error_of;

namespace fs = std::filesystem;
using ::testing::ElementsAre;

// 10 train reviews per class, 3 test reviews per class, plus train/unsup and top-level files.
std::vector<testing::TreeEntry> tiny_imdb() {
  std::vector<testing::TreeEntry> entries = {{"aclImdb/README", "readme"}, {"aclImdb/imdb.vocab", "the\n"}};
  for (const char* label : {"neg", "pos"}) {
    for (int i = 0; i < 10; ++i) {
      entries.push_back({fmt::format("aclImdb/train/{}/{}_1.txt", label, i), fmt::format("Train {} {}", label, i)});
    }
    for (int i = 0; i < 3; ++i) {
      entries.push_back({fmt::format("aclImdb/test/{}/{}_1.txt", label, i), fmt::format("Test {} {}", label, i)});
    }
  }
  entries.push_back({"aclImdb/train/unsup/0_0.txt", "unlabelled"});
  return entries;
}

TEST(Imdb, LoadsSplitsFromATarballOrADirectory) {
  const testing::TempDir dir("imdb_tiny");
  testing::write_tar_gz(dir / "aclImdb_v1.tar.gz", tiny_imdb());
  testing::write_tree(dir / "extracted", tiny_imdb());
  for (const fs::path& path : {dir / "aclImdb_v1.tar.gz", dir / "extracted", dir / "extracted" / "aclImdb"}) {
    SCOPED_TRACE(path.string());
    const ImdbSplits s = load_imdb(path);
    // Sorted list: neg/0..9 (indices 0-9) then pos/0..9 (10-19); RandomState(42) shuffles 20 items,
    // validation = the last int(0.2 * 20) = 4.
    ASSERT_EQ(s.train.texts.size(), 16u);
    ASSERT_EQ(s.validation.texts.size(), 4u);
    ASSERT_EQ(s.test.texts.size(), 6u);
    EXPECT_THAT(s.test.class_names, ElementsAre("neg", "pos"));
    EXPECT_EQ(s.test.texts[0], "test neg 0");  // lowercased
    EXPECT_THAT(s.test.labels, ElementsAre(0, 0, 0, 1, 1, 1));
    for (size_t i = 0; i < s.train.texts.size(); ++i) {
      EXPECT_EQ(s.train.labels[i], s.train.texts[i].find("pos") != std::string::npos ? 1 : 0);
    }
  }
}


TEST(Imdb, MissingFolderIsNamed) {
  const testing::TempDir dir("imdb_missing");
  std::vector<testing::TreeEntry> train_only = tiny_imdb();
  std::erase_if(train_only, [](const testing::TreeEntry& e) { return e.path.starts_with("aclImdb/test/"); });
  testing::write_tree(dir / "extracted", train_only);
  testing::write_tar_gz(dir / "aclImdb_v1.tar.gz", train_only);
  EXPECT_THAT(error_of([&] { load_imdb(dir / "extracted" / "aclImdb"); }),
              ::testing::EndsWith((dir / "extracted" / "aclImdb").string() + " has no folder test"));
  EXPECT_THAT(error_of([&] { load_imdb(dir / "extracted"); }), ::testing::EndsWith(" has no folder aclImdb/test"));
  EXPECT_THAT(error_of([&] { load_imdb(dir / "aclImdb_v1.tar.gz"); }), ::testing::EndsWith(" has no folder aclImdb/test"));
}

TEST(Imdb, FindImdbPrefersTheUserPathThenFp8kitData) {
  const testing::TempDir dir("imdb_find");
  EXPECT_THROW(find_imdb(dir / "missing.tar.gz"), Error);
  // An empty path is a mistake (--data ""), not a request to download into ./data.
  EXPECT_THAT(error_of([] { find_imdb(fs::path()); }), ::testing::HasSubstr("IMDB data path is empty"));
  EXPECT_EQ(find_imdb(dir.path()), dir.path());
  std::ofstream(dir / "aclImdb_v1.tar.gz") << "x";
  const char* old = std::getenv("FP8KIT_DATA");
  const std::string saved = old ? old : "";
  setenv("FP8KIT_DATA", dir.path().c_str(), 1);
  EXPECT_EQ(find_imdb(), fs::weakly_canonical(dir / "aclImdb_v1.tar.gz"));
  setenv("FP8KIT_DATA", (dir / "aclImdb_v1.tar.gz").c_str(), 1);
  EXPECT_EQ(find_imdb(), dir / "aclImdb_v1.tar.gz");
  if (old) {
    setenv("FP8KIT_DATA", saved.c_str(), 1);
  } else {
    unsetenv("FP8KIT_DATA");
  }
}

TEST(Imdb, VocabularyCacheIsWrittenThenRead) {
  const testing::TempDir dir("imdb_vocab");
  testing::write_tar_gz(dir / "aclImdb_v1.tar.gz", tiny_imdb());
  const ImdbSplits s = load_imdb(dir / "aclImdb_v1.tar.gz");
  text::WordPieceLearnerOptions options;
  options.vocab_size = 30;
  const auto learned = imdb_vocabulary(s, dir / "cache" / "vocab.txt", options);
  EXPECT_TRUE(fs::exists(dir / "cache" / "vocab.txt"));
  EXPECT_EQ(imdb_vocabulary(s, dir / "cache" / "vocab.txt", options), learned);
  std::ofstream(dir / "bad.txt") << "x\ny\n";
  EXPECT_THROW(imdb_vocabulary(s, dir / "bad.txt", options), Error);  // not [PAD], [UNK] first
}

// The real data: $FP8KIT_DATA or ../shared/datasets/aclImdb_v1.tar.gz next to the checkout.
std::optional<fs::path> real_imdb() {
  if (const char* env = std::getenv("FP8KIT_DATA"); env && *env) {
    const fs::path p = env;
    if (fs::is_regular_file(p)) return p;
    if (fs::exists(p / "aclImdb_v1.tar.gz")) return p / "aclImdb_v1.tar.gz";
    if (fs::exists(p / "aclImdb")) return p / "aclImdb";
  }
  const fs::path shared = fs::path(FP8KIT_SOURCE_DIR) / ".." / "shared" / "datasets" / "aclImdb_v1.tar.gz";
  if (fs::exists(shared)) return shared;
  return std::nullopt;
}

// One test case, so that ctest (one process per case) loads the data and learns the vocabulary once.
TEST(ImdbReal, SplitsVocabularyAndTheSeedsExampleSentence) {
  const auto path = real_imdb();
  if (!path) {
    GTEST_SKIP() << "IMDB data not found: set FP8KIT_DATA to aclImdb_v1.tar.gz or put it at "
                    "../shared/datasets/aclImdb_v1.tar.gz next to the checkout";
  }
  const ImdbSplits s = load_imdb(*path);
  EXPECT_EQ(s.train.texts.size(), 20000u);
  EXPECT_EQ(s.validation.texts.size(), 5000u);
  EXPECT_EQ(s.test.texts.size(), 25000u);
  EXPECT_EQ(std::count(s.test.labels.begin(), s.test.labels.end(), 1), 12500);
  // The first training example is file 6868 of the sorted list (the spec's shuffle): a neg review.
  EXPECT_EQ(s.train.labels[0], 0);

  const std::vector<std::string> vocab = imdb_vocabulary(s);
  // 19,506 tokens: the threshold search stops within its 5% slack below 20,000 (the model still
  // sizes its embedding for 20,000).
  EXPECT_EQ(vocab.size(), 19506u);
  ASSERT_GT(vocab.size(), 110u);
  EXPECT_EQ(vocab[0], "[PAD]");
  EXPECT_EQ(vocab[1], "[UNK]");
  EXPECT_EQ(vocab[2], "!");
  EXPECT_EQ(vocab[3], "\"");
  EXPECT_EQ(vocab[14], "-");
  EXPECT_EQ(vocab[15], ".");
  EXPECT_THAT(std::vector<std::string>(vocab.begin() + 100, vocab.begin() + 110),
              ElementsAre("à", "á", "â", "ã", "ä", "å", "æ", "ç", "è", "é"));

  const text::WordPieceTokenizer tokenizer(vocab);
  const std::string sentence =
      "great movie - especially the music - etta james - \"at last\". this speaks volumes when you have finally "
      "found that special someone.";
  std::vector<int32_t> expected = {218, 150, 14,  393, 137,  356, 14,  4917, 2941, 719, 14,  3,   164, 370,
                                   3,   15,  145, 2705, 11670, 186, 155, 160,  557,  391, 146, 452, 416, 15};
  expected.resize(200, 0);
  const auto ids = tokenizer.encode(sentence, 200);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tokenizer.detokenize(std::span<const int32_t>(ids).first(28)),
            "great movie - especially the music - etta james - \" at last \" . this speaks volumes when you have "
            "finally found that special someone .");
  // The sentence is one of the training reviews.
  EXPECT_NE(std::find(s.train.texts.begin(), s.train.texts.end(), sentence), s.train.texts.end());
}

}  // namespace
}  // namespace fp8kit::data
