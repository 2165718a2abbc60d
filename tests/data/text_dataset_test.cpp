// Class-subdirectory datasets from directories and .tar.gz files written by the test itself.
#include "data/text_dataset.h"

#include "archive_writer.h"
#include "base/error.h"
#include "common/temp_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fp8kit::data {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TreeEntry;

// A small aclImdb-like layout: numeric names that sort byte-wise, an ignored class folder, a
// nested folder, non-.txt files and top-level files.
std::vector<TreeEntry> sample_tree() {
  return {
      {"top/README", "not an example"},
      {"top/train/", ""},
      {"top/train/pos/", ""},
      {"top/train/pos/1_1.txt", "Pos One"},
      {"top/train/pos/10000_4.txt", "Pos Ten Thousand"},
      {"top/train/pos/0_3.txt", "Pos Zero"},
      {"top/train/neg/", ""},
      {"top/train/neg/b.txt", "Neg B"},
      {"top/train/neg/a.TXT", "Neg A"},
      {"top/train/neg/notes.feat", "ignored"},
      {"top/train/neg/sub/z.txt", "Neg Sub Z"},
      {"top/train/neg/zz.txt", "Neg ZZ"},
      {"top/train/unsup/", ""},
      {"top/train/unsup/0_0.txt", "unlabelled"},
      {"top/train/labeledBow.feat", "ignored"},
      {"top/test/neg/0_2.txt", "Test Neg"},
      {"top/test/pos/0_10.txt", "Test Pos"},
  };
}

void expect_sample_train(const TextDataset& d) {
  EXPECT_THAT(d.class_names, ElementsAre("neg", "pos"));
  // Keras order: the class folder's own files (sorted), then its subfolders'.
  EXPECT_THAT(d.paths, ElementsAre("neg/a.TXT", "neg/b.txt", "neg/zz.txt", "neg/sub/z.txt", "pos/0_3.txt",
                                   "pos/10000_4.txt", "pos/1_1.txt"));
  EXPECT_THAT(d.labels, ElementsAre(0, 0, 0, 0, 1, 1, 1));
  EXPECT_THAT(d.texts, ElementsAre("Neg A", "Neg B", "Neg ZZ", "Neg Sub Z", "Pos Zero", "Pos Ten Thousand", "Pos One"));
}

TEST(TextDataset, FromDirectory) {
  const testing::TempDir dir("dataset_dir");
  testing::write_tree(dir.path(), sample_tree());
  TextDatasetOptions options;
  options.class_names = {"neg", "pos"};
  expect_sample_train(load_text_dataset(dir / "top" / "train", "", options));
  expect_sample_train(load_text_dataset(dir.path(), "top/train", options));
  // Without a class list every subfolder is a class, sorted.
  EXPECT_THAT(load_text_dataset(dir.path(), "top/train").class_names, ElementsAre("neg", "pos", "unsup"));
}

TEST(TextDataset, FromTarGzInOnePass) {
  const testing::TempDir dir("dataset_tgz");
  testing::write_tar_gz(dir / "data.tar.gz", sample_tree());
  TextDatasetOptions options;
  options.class_names = {"neg", "pos"};
  const auto both = load_text_datasets(dir / "data.tar.gz", {"top/train", "top/test/"}, options);
  ASSERT_EQ(both.size(), 2u);
  expect_sample_train(both[0]);
  EXPECT_THAT(both[1].texts, ElementsAre("Test Neg", "Test Pos"));
  EXPECT_THAT(load_text_dataset(dir / "data.tar.gz", "top/train").class_names, ElementsAre("neg", "pos", "unsup"));
}

TEST(TextDataset, ArchivesWithoutDirectoryEntries) {
  const testing::TempDir dir("dataset_nodirs");
  testing::write_tar_gz(dir / "d.tgz", {{"./b/x.txt", "bx"}, {"./a/y.txt", "ay"}});
  const auto d = load_text_dataset(dir / "d.tgz");
  EXPECT_THAT(d.class_names, ElementsAre("a", "b"));
  EXPECT_THAT(d.texts, ElementsAre("ay", "bx"));
}

TEST(TextDataset, LowercasesAsciiOnly) {
  const testing::TempDir dir("dataset_lower");
  testing::write_tree(dir.path(), {{"c/1.txt", "GREAT Été"}});
  TextDatasetOptions options;
  options.lowercase = true;
  EXPECT_THAT(load_text_dataset(dir.path(), "", options).texts, ElementsAre("great Été"));
}

TEST(TextDataset, InvalidUtf8AndEmptyFilesAreDecodedAndCounted) {
  const testing::TempDir dir("dataset_utf8");
  testing::write_tar_gz(dir / "d.tar.gz", {{"c/1.txt", "caf\xE9"}, {"c/2.txt", ""}, {"c/3.txt", "ok \xFF\xFE"}});
  TextDatasetOptions options;
  options.warn = false;
  const auto d = load_text_dataset(dir / "d.tar.gz", "", options);
  EXPECT_THAT(d.texts, ElementsAre("caf\uFFFD", "", "ok \uFFFD\uFFFD"));
  EXPECT_EQ(d.files_with_invalid_utf8, 2);
  EXPECT_EQ(d.empty_files, 1);
}

TEST(TextDataset, BadInputGivesClearErrors) {
  const testing::TempDir dir("dataset_bad");
  auto message = [](auto&& load) {
    try {
      load();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message([&] { load_text_dataset(dir / "missing"); }), HasSubstr("does not exist"));

  testing::write_tree(dir / "flat", {{"1.txt", "a"}, {"2.txt", "b"}});  // no class folders
  EXPECT_THAT(message([&] { load_text_dataset(dir / "flat"); }), HasSubstr("no class folders"));
  testing::write_tar_gz(dir / "flat.tar.gz", {{"1.txt", "a"}});
  EXPECT_THAT(message([&] { load_text_dataset(dir / "flat.tar.gz"); }), HasSubstr("no class folders"));

  TextDatasetOptions options;
  options.class_names = {"neg", "pos"};
  testing::write_tree(dir / "onlyneg", {{"neg/1.txt", "a"}});
  EXPECT_THAT(message([&] { load_text_dataset(dir / "onlyneg", "", options); }), HasSubstr("no class folder \"pos\""));
  EXPECT_THAT(message([&] { load_text_dataset(dir.path(), "nowhere"); }), HasSubstr("has no folder nowhere"));

  std::ofstream(dir / "junk.tar.gz") << "this is not an archive";
  EXPECT_THAT(message([&] { load_text_dataset(dir / "junk.tar.gz"); }), ::testing::Not(HasSubstr("no error")));
}

TEST(TextDataset, TruncatedTarballIsAnError) {
  const testing::TempDir dir("dataset_truncated");
  std::vector<TreeEntry> entries;
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "word" + std::to_string(i * 7919 % 1000) + " ";
  for (int i = 0; i < 40; ++i) entries.push_back({"c" + std::to_string(i % 2) + "/" + std::to_string(i) + ".txt", text + std::to_string(i)});
  testing::write_tar_gz(dir / "full.tar.gz", entries);
  const auto size = fs::file_size(dir / "full.tar.gz");
  for (double fraction : {0.1, 0.5, 0.95}) {
    fs::copy_file(dir / "full.tar.gz", dir / "cut.tar.gz", fs::copy_options::overwrite_existing);
    fs::resize_file(dir / "cut.tar.gz", static_cast<uintmax_t>(size * fraction));
    try {
      load_text_dataset(dir / "cut.tar.gz");
      ADD_FAILURE() << "no error for a tarball cut at " << fraction;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("truncated or corrupt")) << fraction;
    }
  }
  EXPECT_EQ(load_text_dataset(dir / "full.tar.gz").texts.size(), 40u);
}

TEST(TextDataset, SelectReordersExamples) {
  TextDataset d;
  d.class_names = {"a", "b"};
  d.texts = {"x", "y", "z"};
  d.labels = {0, 1, 1};
  d.paths = {"a/x", "b/y", "b/z"};
  const std::vector<int64_t> order = {2, 0};
  const auto s = select(d, order);
  EXPECT_THAT(s.texts, ElementsAre("z", "x"));
  EXPECT_THAT(s.labels, ElementsAre(1, 0));
  EXPECT_THAT(s.class_names, ElementsAre("a", "b"));
  const std::vector<int64_t> bad = {3};
  EXPECT_THROW(select(d, bad), Error);
}

}  // namespace
}  // namespace fp8kit::data
