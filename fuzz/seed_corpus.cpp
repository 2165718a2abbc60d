// Writes the seed corpus of every fuzz target, valid inputs to start mutating from, under
// DIR/<target>/ (`fuzz_seed_corpus DIR`; the ctest fixture of the fuzz tests runs it). Made here
// rather than committed, so the seeds follow the formats as the writers change.
#include "data/archive_writer.h"
#include "fuzz_support.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "numerics/histogram.h"
#include "ops/scaling_table.h"
#include "quant/calibration.h"
#include "text/bpe_learner.h"
#include "text/vocab_file.h"
#include "train/health.h"
#include "train/metrics_log.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace fp8kit;

namespace {

void write_seed(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

void write_seed(const fs::path& path, std::span<const std::byte> bytes) {
  write_seed(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

void safetensors_seeds(const fs::path& dir) {
  const std::vector<float> values = {1.5f, -2.0f, 0.25f, 448.0f, -0.0f, 3.0f};
  io::SafetensorsFile file;
  file.metadata = {{"format", "pt"}, {"note", "seed"}};
  file.tensors.push_back(io::f32_tensor("layer/kernel", {2, 3}, values));
  file.tensors.push_back(io::f32_tensor("scalar", {}, std::span(values).first(1)));
  file.tensors.push_back({"codes", io::Dtype::F8_E4M3, {4}, std::vector<std::byte>(4, std::byte{0x38})});
  file.tensors.push_back({"ids", io::Dtype::I64, {1, 2}, std::vector<std::byte>(16, std::byte{1})});
  file.tensors.push_back({"half", io::Dtype::BF16, {3}, std::vector<std::byte>(6, std::byte{0x3f})});
  file.tensors.push_back({"empty", io::Dtype::F32, {0, 4}, {}});
  write_seed(dir / "tensors.safetensors", io::serialize_safetensors(file));
  write_seed(dir / "empty.safetensors", io::serialize_safetensors({}));
}

void checkpoint_seeds(const fs::path& dir) {
  fuzz::CheckpointState state;
  state.kernel = {1, 2, 3, 4, 5, 6};
  state.step = {7};
  io::save_checkpoint(dir / "checkpoint.safetensors", state.entries(), {{"precision", "fp8"}, {"epoch", "2"}});
}

void calibration_seeds(const fs::path& dir) {
  quant::CalibrationStats stats;
  stats.activations["model.layers.0.self_attn.q_proj"] = {{0.5f, 2.0f}, std::vector<uint64_t>(kHistogramBins, 1)};
  stats.activations["model.layers.0.self_attn.k_cache"] = {{3.0f}, {}};
  stats.prompts = 2;
  stats.tokens = 9;
  quant::save_calibration(dir / "calibration.safetensors", stats);
}

void text_dataset_seeds(const fs::path& dir) {
  const std::vector<testing::TreeEntry> imdb_like = {
      {"train/", ""},
      {"train/neg/0_3.txt", "A dull movie.<br /><br />Skip it."},
      {"train/pos/1_9.txt", "Great MOVIE, especially the music!"},
      {"train/unsup/2_0.txt", "not labelled"},
      {"test/neg/0_2.txt", "bad \xff bytes"},
      {"test/pos/10_8.txt", ""},
      {"test/pos/nested/3_7.txt", "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac"},
      {"test/pos/readme.md", "not a review"},
  };
  testing::write_tar_gz(dir / "dataset.tar.gz", imdb_like);
  testing::write_tar_gz(dir / "no_classes.tar.gz", {{"train/a.txt", "x"}, {"test/b.txt", "y"}});
}

void vocab_seeds(const fs::path& dir) {
  text::write_vocab(dir / "vocab.txt", fuzz::tokenizer_vocab());
  write_seed(dir / "crlf.txt", "[PAD]\r\n[UNK]\r\nthe\r\n##s\r\n");
}

void tokenizer_seeds(const fs::path& dir) {
  write_seed(dir / "review.txt", "the great movie!<br />un##ably good, é日本\tmovies");
  write_seed(dir / "unicode.txt", "caf\xc3\xa9\xe2\x80\x94\xe2\x80\x8b\xc2\xa0x\xf0\x9f\x98\x80 \xe3\x80\x82" "end");
  write_seed(dir / "invalid.txt", "a\xff\xc3(b\xed\xa0\x80 \xf4\x90\x80\x80 the");
  write_seed(dir / "long_word.txt", std::string(150, 'a') + " unbs");
}

void tokenizer_json_seeds(const fs::path& dir) {
  const std::vector<std::string> texts = {"the cat's 1234 caf\xc3\xa9s\r\n\tthe cats", "the \xe6\x97\xa5\xe6\x9c\xac cat"};
  for (const text::SplitPattern pattern : {text::SplitPattern::kGpt2, text::SplitPattern::kLlama3}) {
    text::learn_bpe(texts, {.vocab_size = 290, .pattern = pattern, .min_pair_count = 1})
        .save(dir / (std::string(text::split_pattern_name(pattern)) + ".json"));
  }
  text::BpeTokenizer(fuzz::bpe_model(text::SplitPattern::kGpt2)).save(dir / "fixed.json");
}

// A metrics log as the trainers write it: the run line, steps, a validation and a health event of
// two FP8 tensors (one saturating), through train::MetricsLog and train::health_event.
void metrics_log_seeds(const fs::path& dir) {
  ops::Context c;
  ops::ScalingTable table;
  table.add("model.layers.0.mlp.up_proj/inputs", Fp8Format::E4M3);
  table.add("model.layers.0.mlp.up_proj/outputs_grad", Fp8Format::E5M2);
  table.allocate(Device::Cpu);
  table.set_recording(true);
  Tensor x({4}, DType::F32);
  const float values[] = {900.0f, 1.0f, 1e-9f, -3.0f};
  x.copy_from_host(values);
  table.record(c, 0, x);
  table.record(c, 1, x);
  train::MetricsLog log(dir / "lm.jsonl", false);
  log.write({{"event", "run"}, {"model", "llama"}, {"precision", "fp8"}, {"recipe", "delayed"}});
  for (int step = 1; step <= 2; ++step)
    log.write({{"event", "step"}, {"precision", "fp8"}, {"step", step}, {"loss", 5.0 / step}});
  log.write({{"event", "validation"}, {"precision", "fp8"}, {"step", 2}, {"loss", 2.5}, {"perplexity", 12.2}});
  nlohmann::json health = train::health_event(table, table.read_records(c));
  health.update(nlohmann::json{{"precision", "fp8"}, {"step", 2}});
  log.write(health);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR (writes DIR/<target>/ for each fuzz target)\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  const std::vector<std::pair<std::string, void (*)(const fs::path&)>> targets = {
      {"safetensors", safetensors_seeds}, {"checkpoint", checkpoint_seeds}, {"calibration", calibration_seeds},
      {"text_dataset", text_dataset_seeds},
      {"vocab", vocab_seeds},             {"tokenizer", tokenizer_seeds},     {"tokenizer_json", tokenizer_json_seeds},
      {"metrics_log", metrics_log_seeds},
  };
  try {
    for (const auto& [name, write] : targets) {
      fs::create_directories(root / name);
      write(root / name);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: cannot write the seed corpus under %s: %s\n", root.c_str(), e.what());
    return 1;
  }
  return 0;
}
