// Class-subdirectory datasets from directories and .tar.gz files written by the test itself.
#include "data/text_dataset.h"

#include "archive_writer.h"
#include "base/error.h"
#include "common/read_text.h"
#include "common/temp_dir.h"
#include "common/error_of.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace fp8kit::data {
namespace {

using testing::error_of;

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
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


// 40 nearly identical ~9 KB files in two classes: a tarball of a few KB.
std::vector<TreeEntry> compressible_tree() {
  std::vector<TreeEntry> entries;
  std::string text;
  for (int i = 0; i < 2000; ++i) text += fmt::format("word{} ", i * 7919 % 1000);
  for (int i = 0; i < 40; ++i) entries.push_back({fmt::format("c{}/{}.txt", i % 2, i), text + std::to_string(i)});
  return entries;
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
  auto message = [](auto&& load) { return error_of(load); };
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

  // A file that is no archive, an empty one and one that cannot be read each say so, not "corrupt".
  std::ofstream(dir / "junk.tar.gz") << "this is not an archive";
  const std::string junk = message([&] { load_text_dataset(dir / "junk.tar.gz"); });
  EXPECT_THAT(junk, HasSubstr((dir / "junk.tar.gz").string() + " is not a .tar.gz or .tar archive"));
  EXPECT_THAT(junk, Not(HasSubstr("corrupt")));
  {
    std::ofstream text(dir / "vocab.txt");  // lines of words: libarchive's mtree reader would take them
    for (int i = 0; i < 30; ++i) text << "token" << i << (i % 3 == 0 ? " ##s" : "") << "\n";
  }
  EXPECT_THAT(message([&] { load_text_dataset(dir / "vocab.txt"); }),
              HasSubstr((dir / "vocab.txt").string() + " is not a .tar.gz or .tar archive"));
  std::ofstream(dir / "empty.tar.gz").flush();
  EXPECT_THAT(message([&] { load_text_dataset(dir / "empty.tar.gz"); }), HasSubstr("empty.tar.gz is empty"));
  if (fs::exists("/proc/self/mem")) {  // a regular file whose first read fails (EIO), even for root
    const std::string unreadable = message([&] { load_text_dataset("/proc/self/mem"); });
    EXPECT_THAT(unreadable, HasSubstr("cannot read /proc/self/mem: "));
    EXPECT_THAT(unreadable, Not(HasSubstr("corrupt")));
  }
  if (geteuid() != 0) {  // root reads a file whatever its mode
    testing::write_tar_gz(dir / "private.tar.gz", {{"c/1.txt", "a"}});
    fs::permissions(dir / "private.tar.gz", fs::perms::none);
    EXPECT_THAT(message([&] { load_text_dataset(dir / "private.tar.gz"); }), HasSubstr("cannot read"));
  }
  // A directory we may not list.
  if (geteuid() != 0) {
    testing::write_tree(dir / "locked", {{"c/1.txt", "a"}});
    fs::permissions(dir / "locked" / "c", fs::perms::none);
    EXPECT_THAT(message([&] { load_text_dataset(dir / "locked"); }), HasSubstr("cannot read"));
    fs::permissions(dir / "locked" / "c", fs::perms::owner_all);
  }
}

TEST(TextDataset, EmptyClassFolderIsAnError) {
  const testing::TempDir dir("dataset_empty_class");
  // train/neg is empty, test/pos holds no .txt file.
  const std::vector<TreeEntry> tree = {{"d/train/neg/", ""},          {"d/train/pos/1.txt", "p"},
                                       {"d/test/neg/1.txt", "n"},     {"d/test/pos/notes.feat", "x"},
                                       {"d/test/pos/sub/", ""}};
  testing::write_tree(dir / "tree", tree);
  testing::write_tar_gz(dir / "d.tar.gz", tree);
  TextDatasetOptions options;
  options.class_names = {"neg", "pos"};
  for (const fs::path& root : {dir / "tree", dir / "d.tar.gz"}) {
    const std::string where = root.string() + ":";
    EXPECT_THAT(error_of([&] { load_text_datasets(root, {"d/train", "d/test"}, options); }),
                HasSubstr(where + "d/train/neg has no .txt files"));
    EXPECT_THAT(error_of([&] { load_text_dataset(root, "d/test", options); }),
                HasSubstr(where + "d/test/pos has no .txt files"));
    // Without a class list every folder is a class, so the same holds.
    EXPECT_THAT(error_of([&] { load_text_dataset(root, "d/train"); }), HasSubstr("d/train/neg has no .txt files"));
  }
}

TEST(TextDataset, NonRegularFilesAreRefused) {
  const testing::TempDir dir("dataset_special");
  ASSERT_EQ(mkfifo((dir / "fifo.tar.gz").c_str(), 0600), 0);
  EXPECT_THAT(error_of([&] { load_text_dataset(dir / "fifo.tar.gz"); }), HasSubstr("fifo.tar.gz is a FIFO"));
  EXPECT_THAT(error_of([&] { load_text_dataset("/dev/null"); }), HasSubstr("/dev/null is a device"));
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string socket_path = (dir / "sock").string();
  ASSERT_LT(socket_path.size(), sizeof address.sun_path);
  std::copy(socket_path.begin(), socket_path.end(), address.sun_path);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_THAT(error_of([&] { load_text_dataset(dir / "sock"); }), HasSubstr("sock is a socket"));
  close(fd);
}

TEST(TextDataset, OversizedFilesAreRefused) {
  const testing::TempDir dir("dataset_big");
  const std::vector<TreeEntry> tree = {{"c/ok.txt", "fine"}, {"c/sub/big.txt", std::string(300, 'x')}};
  testing::write_tree(dir / "tree", tree);
  testing::write_tar_gz(dir / "d.tar.gz", tree);
  TextDatasetOptions options;
  options.max_file_bytes = 200;
  for (const fs::path& root : {dir / "tree", dir / "d.tar.gz"}) {
    const std::string message = error_of([&] { load_text_dataset(root, "", options); });
    EXPECT_THAT(message, HasSubstr("c/sub/big.txt"));
    EXPECT_THAT(message, HasSubstr("larger than 200 bytes"));
    options.max_file_bytes = 300;
    EXPECT_EQ(load_text_dataset(root, "", options).texts.size(), 2u);
    options.max_file_bytes = 200;
  }
  EXPECT_EQ(TextDatasetOptions().max_file_bytes, int64_t{64} << 20);
}

TEST(TextDataset, LoadsFromAnArchiveInMemory) {
  const testing::TempDir dir("dataset_memory");
  testing::write_tar_gz(dir / "data.tar.gz", sample_tree());
  const std::string bytes = testing::read_text(dir / "data.tar.gz");
  const auto image = std::as_bytes(std::span(bytes));
  TextDatasetOptions options;
  options.class_names = {"neg", "pos"};
  const auto both = load_text_datasets_from_memory(image, "image.tgz", {"top/train", "top/test"}, options);
  ASSERT_EQ(both.size(), 2u);
  expect_sample_train(both[0]);
  EXPECT_THAT(both[1].texts, ElementsAre("Test Neg", "Test Pos"));
  EXPECT_THAT(error_of([&] { load_text_datasets_from_memory(image.first(image.size() / 2), "image.tgz", {"top/train"}); }),
              HasSubstr("image.tgz is truncated or corrupt"));
  EXPECT_THAT(error_of([&] { load_text_datasets_from_memory(image, "image.tgz", {"top/none"}); }),
              HasSubstr("image.tgz has no folder top/none"));
}

TEST(TextDataset, TruncatedTarballIsAnError) {
  const testing::TempDir dir("dataset_truncated");
  testing::write_tar_gz(dir / "full.tar.gz", compressible_tree());
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

// One flipped bit anywhere in the gzip stream, the trailer (CRC32, length) included, is an error
// naming the file, though tar's end marker comes before the damage's effect is seen.
TEST(TextDataset, FlippedBitInTarballIsAnError) {
  const testing::TempDir dir("dataset_flipped");
  testing::write_tar_gz(dir / "full.tar.gz", compressible_tree());
  const std::string full = testing::read_text(dir / "full.tar.gz");
  std::vector<size_t> positions;
  for (double fraction : {0.1, 0.25, 0.4, 0.6, 0.9}) positions.push_back(static_cast<size_t>(full.size() * fraction));
  for (size_t from_end : {8, 5, 4, 1}) positions.push_back(full.size() - from_end);  // CRC32, then length
  for (size_t position : positions) {
    for (int bit : {0, 3, 6}) {
      std::string bytes = full;
      bytes[position] = static_cast<char>(bytes[position] ^ (1 << bit));
      testing::write_bytes(dir / "flipped.tar.gz", bytes);
      const std::string message = error_of([&] { load_text_dataset(dir / "flipped.tar.gz"); });
      EXPECT_THAT(message, HasSubstr((dir / "flipped.tar.gz").string() + " is truncated or corrupt"))
          << "byte " << position << " of " << full.size() << ", bit " << bit;
      EXPECT_THAT(message, Not(HasSubstr("INTERNAL")));
    }
  }
  EXPECT_EQ(load_text_dataset(dir / "full.tar.gz").texts.size(), 40u);
}

// A damaged tar header (here in an uncompressed .tar, so no gzip check catches it) is our error,
// not libarchive's complaint about being used after a failure.
TEST(TextDataset, DamagedTarHeaderIsAnError) {
  const testing::TempDir dir("dataset_damaged");
  testing::write_tar_gz(dir / "full.tar", compressible_tree(), /*gzip=*/false);
  const std::string full = testing::read_text(dir / "full.tar");
  const size_t second_header = full.find("c1/1.txt");  // the second entry's name, at its header's start
  ASSERT_NE(second_header, std::string::npos);
  for (size_t offset : {size_t{0}, size_t{100}, size_t{153}}) {  // name, mode, checksum (last digit)
    std::string bytes = full;
    bytes[second_header + offset] = static_cast<char>(bytes[second_header + offset] ^ 0x10);
    testing::write_bytes(dir / "damaged.tar", bytes);
    const std::string message = error_of([&] { load_text_dataset(dir / "damaged.tar"); });
    EXPECT_THAT(message, HasSubstr((dir / "damaged.tar").string() + " is truncated or corrupt")) << offset;
    EXPECT_THAT(message, Not(HasSubstr("INTERNAL"))) << offset;
  }
  EXPECT_EQ(load_text_dataset(dir / "full.tar").texts.size(), 40u);
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
