// `fp8kit train`: the seed experiment, IMDB sentiment with a tiny Transformer, trained in fp32, bf16
// or fp8 (or several, compared on the same data order), with checkpoints, resume and FP8 inspection.
#include "base/error.h"
#include "cli/command.h"
#include "cli/options.h"
#include "cli/recipe_options.h"
#include "data/imdb.h"
#include "io/safetensors.h"
#include "runtime/device.h"
#include "text/wordpiece_tokenizer.h"
#include "train/metrics_log.h"
#include "train/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::cli {
namespace {

namespace fs = std::filesystem;

struct Args {
  std::string device = "cpu";
  std::string precision = "bf16";
  std::vector<std::string> compare;
  RecipeArgs recipe;
  int epochs = 3;
  int batch_size = 32;
  uint64_t seed = 0;
  std::string data;
  std::string out = "out/train";
  bool resume = false;
  bool inspect_fp8 = false;
  std::string vocab;
  int64_t limit = 0;
  int64_t health_every = 100;
};

// Limit of --batch-size: far beyond use (the seed's batch is 32).
constexpr int64_t kMaxBatchSize = 100'000;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The dataset's name for file names: its folder or archive name without .tar.gz / .tgz / .tar,
// other characters than [A-Za-z0-9._-] as '_' ("aclImdb_v1" for aclImdb_v1.tar.gz).
std::string dataset_name(const fs::path& data_path) {
  fs::path path = data_path.lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "aclImdb/"
  std::string name = path.filename().string();
  for (const std::string_view extension : {".gz", ".tgz", ".tar"}) {
    if (name.size() > extension.size() && name.ends_with(extension)) name.resize(name.size() - extension.size());
  }
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return name.empty() ? "data" : name;
}

// Where a learned vocabulary is cached when --vocab is not given: named by the dataset and keyed by
// what determines the vocabulary, the data (path, and a file's size and modification time) and the
// vocabulary size, under $XDG_CACHE_HOME/fp8kit or ~/.cache/fp8kit.
fs::path default_vocab_cache(const fs::path& data_path, int64_t vocab_size) {
  fs::path dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    dir = fs::path(xdg) / "fp8kit";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = fs::path(home) / ".cache" / "fp8kit";
  } else {
    dir = fs::path(".cache") / "fp8kit";
  }
  std::error_code error;
  const fs::path canonical = fs::weakly_canonical(data_path, error);
  std::string key = (error ? data_path : canonical).string();
  if (fs::is_regular_file(data_path, error)) {
    key += fmt::format(":{}:{}", fs::file_size(data_path, error),
                       fs::last_write_time(data_path, error).time_since_epoch().count());
  }
  uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (unsigned char c : key) hash = (hash ^ c) * 1099511628211ull;
  return dir / fmt::format("vocab-{}-{}-{:016x}.txt", dataset_name(error ? data_path : canonical), vocab_size, hash);
}

train::TokenDataset tokenize(const text::WordPieceTokenizer& tokenizer, const data::TextDataset& dataset,
                             int64_t sequence_length, int64_t limit) {
  // With a limit, evenly spaced examples, so both classes of the sorted test set are kept.
  const size_t size = dataset.texts.size();
  const size_t n = limit > 0 ? std::min<size_t>(limit, size) : size;
  std::vector<std::string> texts;
  train::TokenDataset tokens;
  tokens.sequence_length = sequence_length;
  for (size_t i = 0; i < n; ++i) {
    texts.push_back(dataset.texts[i * size / n]);
    tokens.labels.push_back(static_cast<float>(dataset.labels[i * size / n]));
  }
  tokens.tokens = tokenizer.encode_batch(texts, sequence_length);
  return tokens;
}

// About the memory a CPU training step holds per example of its batch: the attention's [heads, T, T]
// probabilities and, per token, some 60 vectors of hidden or intermediate width (layer outputs, their
// gradients, FP8 codes and values): 1.86 MB at the seed's sizes, where fp8 steps were measured to
// take 1.7 MB per example (fp32 1.3 MB).
uint64_t step_bytes_per_example(const models::SeedClassifierConfig& c) {
  const uint64_t T = c.sequence_length, width = std::max(c.hidden_dim, c.intermediate_dim);
  return sizeof(float) * (static_cast<uint64_t>(c.num_heads) * T * T + 60 * T * width);
}

// The trainer's device for --device (cpu or cuda), checked before the data is read.
Device step_device(const Args& args) {
  if (args.device == "cpu") return Device::Cpu;
  try {
    require_cuda();  // says why not (no CUDA backend in this build, no GPU)
  } catch (const Error& e) {
    fail("--device cuda: {}", e.what());
  }
  return Device::Cuda;
}

// --out, checked before the data is read and the vocabulary learned: a file in its
// place, or a folder this process cannot write in, fails now and names the option. Nothing is created.
void check_out(const fs::path& out) {
  std::error_code error;
  fs::path existing = out;
  while (!existing.empty() && !fs::exists(existing, error)) existing = existing.parent_path();
  if (existing.empty()) existing = ".";
  FP8KIT_CHECK(fs::is_directory(existing, error), "--out {}{}; pick another --out", out.string(),
               existing == out ? " is a file, not a folder"
                               : fmt::format(": {} is a file, so the folder cannot be made", existing.string()));
  FP8KIT_CHECK(::access(existing.c_str(), W_OK | X_OK) == 0, "--out {}: cannot write in {}: {}; pick another --out",
               out.string(), existing.string(), std::strerror(errno));
}

void run(const Args& args) {
  const Device device = step_device(args);
  std::vector<nn::Precision> precisions;
  for (const std::string& text : args.compare.empty() ? std::vector{args.precision} : args.compare) {
    const nn::Precision precision = nn::parse_precision(text);
    FP8KIT_CHECK(std::find(precisions.begin(), precisions.end(), precision) == precisions.end(),
                 "--compare lists {} twice", nn::name(precision));
    precisions.push_back(precision);
  }
  const Fp8Recipe recipe = args.recipe.parse();
  const models::SeedClassifierConfig config;
  std::vector<std::string> names;
  for (nn::Precision p : precisions) names.emplace_back(nn::name(p));
  if (args.resume) {
    // A run that was killed before its first checkpoint landed leaves its metrics log or a
    // checkpoint's temporary file: resuming it starts from the beginning. Only an --out with no
    // trace of a run is refused (a mistyped directory).
    const bool any = fs::exists(fs::path(args.out) / "metrics.jsonl") ||
                     std::any_of(precisions.begin(), precisions.end(), [&](nn::Precision p) {
                       const fs::path checkpoint = train::checkpoint_path(args.out, p);
                       return fs::exists(checkpoint) || !io::stale_temporary_files(checkpoint).empty();
                     });
    FP8KIT_CHECK(any, "--resume: {} holds no checkpoint-{}.safetensors to resume from", args.out,
                 names.size() == 1 ? names.front() : fmt::format("{{{}}}", fmt::join(names, ",")));
  }

  check_out(args.out);

  auto start = std::chrono::steady_clock::now();
  const fs::path data_path = data::find_imdb(args.data.empty() ? std::nullopt : std::optional<fs::path>(args.data));
  const fs::path vocab_path = args.vocab.empty() ? default_vocab_cache(data_path, config.vocabulary_size)
                                                 : fs::path(args.vocab);
  const data::VocabularyFile vocab_kind = args.vocab.empty() ? data::VocabularyFile::Cache : data::VocabularyFile::User;
  // A vocabulary that exists is read before the data: a --vocab that is a folder, an empty file or a
  // tokenizer.json fails now, not after IMDB has loaded.
  std::optional<std::vector<std::string>> vocab = data::read_imdb_vocabulary(vocab_path, {}, vocab_kind);
  if (vocab) {
    FP8KIT_CHECK(static_cast<int64_t>(vocab->size()) <= config.vocabulary_size,
                 "the vocabulary {} has {} tokens but the model embeds {}", vocab_path.string(), vocab->size(),
                 config.vocabulary_size);
    fmt::print("Reading the WordPiece vocabulary from {}\n", vocab_path.string());
  }
  fmt::print("Loading {}\n", data_path.string());
  std::fflush(stdout);
  const data::ImdbSplits splits = data::load_imdb(data_path);
  fmt::print("  {} training, {} validation, {} test texts ({:.1f}s)\n", splits.train.texts.size(),
             splits.validation.texts.size(), splits.test.texts.size(), seconds_since(start));

  start = std::chrono::steady_clock::now();
  if (!vocab) {
    // The seed's settings learn at most 20,000 tokens, the size the model embeds.
    fmt::print("Learning the WordPiece vocabulary, caching it in {}\n", vocab_path.string());
    std::fflush(stdout);
    vocab = data::imdb_vocabulary(splits, vocab_path, {}, vocab_kind);
  }
  text::WordPieceTokenizer tokenizer(*std::move(vocab));
  const train::TokenDataset train_data = tokenize(tokenizer, splits.train, config.sequence_length, args.limit);
  const train::TokenDataset validation = tokenize(tokenizer, splits.validation, config.sequence_length, args.limit);
  const train::TokenDataset test = tokenize(tokenizer, splits.test, config.sequence_length, args.limit);
  fmt::print("  {} tokens; tokenized {} texts to {} ids each ({:.1f}s)\n\n", tokenizer.vocab().size(),
             train_data.size() + validation.size() + test.size(), config.sequence_length, seconds_since(start));
  if (args.device == "cpu") {
    // Steps and evaluations take batches of up to --batch-size examples, fewer when a split is smaller.
    const int64_t largest = std::max({train_data.size(), validation.size(), test.size()});
    const int64_t batch = std::min<int64_t>(args.batch_size, largest);
    require_memory(static_cast<uint64_t>(batch) * step_bytes_per_example(config),
                   fmt::format("a training step on a batch of {} texts of {} tokens", batch, config.sequence_length),
                   "pass a smaller --batch-size");
  }

  models::SeedClassifier summary_model(config, args.seed);
  summary_model.set_precision(precisions.front(), recipe);
  fmt::print("{}\n", summary_model.summary());
  if (!args.resume) {
    // Starting over empties the metrics log, so an earlier run's checkpoints of these precisions
    // go too: a later --resume must never continue a run whose log lines are gone.
    for (nn::Precision p : precisions) {
      const fs::path old = train::checkpoint_path(args.out, p);
      std::error_code error;
      if (fs::remove(old, error)) fmt::print("Starting over: removed {} of an earlier run\n", old.string());
      FP8KIT_CHECK(!error, "cannot remove {} of an earlier run: {}", old.string(), error.message());
    }
  }
  train::MetricsLog log(fs::path(args.out) / "metrics.jsonl", args.resume);
  nlohmann::json run = {{"event", "run"}, {"precisions", names}};
  run.update(args.recipe.json());
  run.update(nlohmann::json{{"epochs", args.epochs},
             {"batch_size", args.batch_size},
             {"seed", args.seed},
             {"health_every", args.health_every},
             {"resume", args.resume},
             {"data", data_path.string()},
             {"train_examples", train_data.size()},
             {"validation_examples", validation.size()},
             {"test_examples", test.size()}});
  log.write_with_next(run);  // after train() has checked the checkpoints it resumes

  struct Row {
    nn::Precision precision;
    train::Evaluation test;
    std::optional<double> seconds_per_epoch;  // none when no epoch ran (--epochs 0, or resumed at --epochs)
  };
  std::vector<Row> rows;
  for (nn::Precision precision : precisions) {
    if (precisions.size() > 1) fmt::print("\n=== {} ===\n", nn::name(precision));
    train::TrainOptions options;
    options.model = config;
    options.precision = precision;
    options.recipe = recipe;
    options.epochs = args.epochs;
    options.batch_size = args.batch_size;
    options.seed = args.seed;
    options.out = args.out;
    options.metrics = &log;
    options.resume = args.resume;
    options.inspect_fp8 = args.inspect_fp8;
    options.health_every = args.health_every;
    options.device = device;
    const train::TrainResult result = train::train(options, train_data, &validation, &test);
    double seconds = 0;
    for (const auto& epoch : result.epochs) seconds += epoch.seconds;
    if (result.test) {
      rows.push_back({precision, *result.test,
                      result.epochs.empty() ? std::nullopt : std::optional(seconds / result.epochs.size())});
    }
    if (result.checkpoint) fmt::print("Checkpoint: {}\n", result.checkpoint->string());
  }

  if (rows.size() > 1) {
    fmt::print("\n{:<10} {:>14} {:>10} {:>15}\n", "precision", "test accuracy", "test loss", "time per epoch");
    for (const Row& row : rows) {
      fmt::print("{:<10} {:>13.2f}% {:>10.4f} {:>15}\n", nn::name(row.precision), 100.0 * row.test.accuracy,
                 row.test.loss, row.seconds_per_epoch ? fmt::format("{:.1f}s", *row.seconds_per_epoch) : "-");
    }
  }
  fmt::print("Metrics: {}\n", log.path().string());
}

void setup(CLI::App& app) {
  auto args = std::make_shared<Args>();
  app.add_option("--device", args->device, "where the steps run: cpu or cuda (needs the CUDA backend and a GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  const CLI::IsMember precisions({"fp32", "bf16", "fp8"});
  auto* precision = app.add_option("--precision", args->precision, "fp32, bf16 (mixed) or fp8")
      ->capture_default_str()
      ->check(precisions);
  app.add_option("--compare", args->compare, "train several precisions on the same data order, e.g. bf16,fp8")
      ->delimiter(',')
      ->excludes(precision)
      ->check(precisions);
  add_recipe_options(app, args->recipe);
  app.add_option("--epochs", args->epochs, "epochs")->capture_default_str()->check(whole_number(0, 100'000));
  app.add_option("--batch-size", args->batch_size, "batch size")
      ->capture_default_str()
      ->check(whole_number(1, kMaxBatchSize));
  add_seed_option(app, args->seed, "seed of the weights, dropout and data order");
  app.add_option("--data", args->data,
                 "aclImdb_v1.tar.gz, an aclImdb directory, or any folder or .tar.gz with train/ and test/, each "
                 "holding neg/ and pos/ folders of .txt files (default: searched, see README)")
      ->check(non_empty_path());
  app.add_option("--out", args->out, "directory for checkpoints and metrics.jsonl")
      ->capture_default_str()
      ->check(non_empty_path());
  app.add_flag("--resume", args->resume,
               "continue from the checkpoints in --out (a precision without one starts from the beginning)");
  app.add_flag("--inspect-fp8", args->inspect_fp8,
               "print the FP8 recipe and the query layer's scales and amax histories before and after training");
  app.add_option("--health-every", args->health_every,
                 "record FP8 health statistics every N steps and at the last into metrics.jsonl, for `fp8kit report` (0: off)")
      ->capture_default_str()
      ->check(whole_number(0, 1'000'000'000));
  app.add_option("--vocab", args->vocab, "vocabulary file: read if it exists, else learned and written there")
      ->check(non_empty_path());
  app.add_option("--limit", args->limit, "use only N evenly spaced texts of each split (quick checks); 0 = all")
      ->check(whole_number(0, 1'000'000'000));
  app.callback([args] { run(*args); });
}

const bool registered =
    register_command({"train", "Train the seed IMDB classifier (fp32, bf16, fp8; --compare)", setup});

}  // namespace
}  // namespace fp8kit::cli
