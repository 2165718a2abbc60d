// `fp8kit lm`: the Llama language model on the IMDB reviews as text. `lm train` learns (or reads) a
// byte-level BPE tokenizer, trains in fp32, bf16 or FP8 on the train reviews with the test reviews
// for validation, and saves an HF model directory, alone or as a data-parallel job (under torchrun,
// srun or mpirun, or its own local processes with --procs); `lm eval` reports a model directory's
// validation loss and perplexity (or a text file's), in a training precision or through the
// inference engine.
// The inference subcommands are in lm_infer.cpp, `lm pack` in lm_pack.cpp.
#include "base/error.h"
#include "cli/command.h"
#include "cli/lm_common.h"
#include "cli/options.h"
#include "cli/recipe_options.h"
#include "data/imdb.h"
#include "data/token_windows.h"
#include "dist/communicator.h"
#include "dist/launch.h"
#include "infer/perplexity.h"
#include "models/llama_io.h"
#include "ops/tensor_checks.h"
#include "report/line_plot.h"
#include "text/bpe_learner.h"
#include "train/lm_trainer.h"
#include "train/metrics_log.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fp8kit::cli {
namespace {

namespace fs = std::filesystem;

// The tokenizer at `path` (exists: whether it did when the job started), or one learned on the
// training texts; `lead` (a job's rank 0) writes it there. Every rank of a job learns the same one,
// rather than reading a file that rank 0 may be writing.
text::BpeTokenizer tokenizer_for(const fs::path& path, bool exists, const Corpus& corpus, int64_t vocab_size,
                                 bool vocab_size_given, bool lead) {
  if (exists) {
    text::BpeTokenizer tokenizer = text::BpeTokenizer::load(path);
    // An earlier run's tokenizer in --out is read as it is: say so, above all when --vocab-size asked
    // for another size, which only a learned tokenizer takes.
    if (lead) {
      const bool other_size = vocab_size_given && tokenizer.vocab_size() != vocab_size;
      fmt::print("Read the tokenizer {} ({} tokens{})\n", path.string(), tokenizer.vocab_size(),
                 other_size ? fmt::format("; --vocab-size {} sets the size of a learned one only", vocab_size) : "");
    }
    return tokenizer;
  }
  const auto start = std::chrono::steady_clock::now();
  text::BpeTokenizer tokenizer = text::learn_bpe(corpus.train, {.vocab_size = vocab_size});
  if (!lead) return tokenizer;
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  tokenizer.save(path);
  fmt::print("Learned a byte-level BPE tokenizer of {} tokens in {:.1f}s: {}\n", tokenizer.vocab_size(),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), path.string());
  return tokenizer;
}

models::LlamaConfig model_config(const std::string& config, int64_t vocab_size) {
  if (is_config_path(config)) {
    const models::LlamaConfig c = models::read_llama_config(config);
    FP8KIT_CHECK(c.vocab_size >= vocab_size, "{} has vocab_size {} but the tokenizer has {} tokens", config,
                 c.vocab_size, vocab_size);
    return c;
  }
  return models::llama_preset(config, vocab_size);
}

// ---- lm train

struct TrainArgs {
  std::string config = "25m";
  std::string tokenizer;
  int64_t vocab_size = 8192;
  bool vocab_size_given = false;  // on the command line (else the default)
  std::string precision = "bf16";
  RecipeArgs recipe;
  std::vector<std::string> linear_recipes;
  bool fp8_attention = false;
  std::string device = "cpu";
  int64_t seq = 256, batch = 16, accumulation = 1, steps = 1000, warmup = 100;
  int64_t loss_chunk = 0;
  bool recompute = false;
  float lr = 6e-4f, min_lr_ratio = 0.1f, weight_decay = 0.1f, clip = 1.0f;
  uint64_t seed = 0;
  int64_t eval_every = 0, eval_batches = 20, checkpoint_every = 0, health_every = 50;
  std::string out = "out/lm";
  bool resume = false;
  std::string data;
  int64_t limit = 0;
  double peak_tflops = 989.0;
  int64_t max_shard_bytes = io::kHfDefaultMaxShardBytes;
  int procs = 1;                     // local processes to start (--procs / --gpus)
  std::string dist_backend = "auto";
  int64_t dist_timeout = 300;  // seconds
  bool zero1 = false;
};

// --procs N: this command again as the N ranks of a job on this host, without --procs.
void launch_ranks(int procs) {
  std::vector<std::string> argv = {dist::current_executable()};
  const std::vector<std::string> args = dist::current_arguments();
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--procs" || args[i] == "--gpus") {
      ++i;  // and its value
    } else if (!args[i].starts_with("--procs=") && !args[i].starts_with("--gpus=")) {
      argv.push_back(args[i]);
    }
  }
  dist::launch_local(argv, {.processes = procs});
}

void run_train(const TrainArgs& a) {
  const Device device = parse_device(a.device);
  if (device == Device::Cuda) require_cuda();
  const nn::Precision precision = nn::parse_precision(a.precision);
  const Fp8Recipe recipe = a.recipe.parse();
  const nn::LinearRecipes linears = nn::LinearRecipes::parse(a.linear_recipes);
  const dist::Rendezvous rendezvous = dist::read_rendezvous();
  if (a.procs > 1) {
    FP8KIT_CHECK(rendezvous.world_size == 1,
                 "--procs starts the job's processes itself, but this one is rank {} of {} ({}): leave --procs out",
                 rendezvous.rank, rendezvous.world_size, rendezvous.source);
    train::check_batch_split(a.batch, a.procs);  // before the ranks start
    launch_ranks(a.procs);
    return;
  }
  train::check_batch_split(a.batch, rendezvous.world_size);  // before the tokenizer is learned
  const fs::path tokenizer_path = a.tokenizer.empty() ? fs::path(a.out) / kTokenizerFile : fs::path(a.tokenizer);
  const bool tokenizer_exists = fs::exists(tokenizer_path);  // before rank 0 can write it (after connect)
  std::unique_ptr<dist::Communicator> comm;
  if (rendezvous.world_size > 1) {
    const dist::Backend backend =
        a.dist_backend == "auto" ? dist::default_backend(device) : dist::parse_backend(a.dist_backend);
    comm = dist::connect(rendezvous, backend, {.timeout = std::chrono::seconds(a.dist_timeout)});
  }
  const bool lead = comm == nullptr || comm->rank() == 0;
  const Corpus corpus = imdb_corpus(a.data, a.limit);
  const text::BpeTokenizer tokenizer =
      tokenizer_for(tokenizer_path, tokenizer_exists, corpus, a.vocab_size, a.vocab_size_given, lead);
  const std::vector<int32_t> train_stream = token_stream(tokenizer, corpus.train);
  const std::vector<int32_t> validation_stream = token_stream(tokenizer, corpus.validation);

  train::LmTrainOptions o;
  o.model = model_config(a.config, tokenizer.vocab_size());
  o.model.bos_token_id = o.model.eos_token_id = *tokenizer.eos_id();  // GPT-2's convention: one <|endoftext|>
  o.precision = precision;
  o.recipe = recipe;
  o.linears = linears;
  o.fp8_attention = a.fp8_attention;
  o.seq = a.seq;
  o.batch = a.batch;
  o.accumulation = a.accumulation;
  o.memory = {.loss_chunk_rows = a.loss_chunk, .recompute = a.recompute};
  o.steps = a.steps;
  o.adam.learning_rate = a.lr;
  o.adam.min_lr_ratio = a.min_lr_ratio;
  o.adam.weight_decay = a.weight_decay;
  o.adam.warmup_steps = a.warmup;
  o.clip = a.clip;
  o.seed = a.seed;
  o.eval_every = a.eval_every;
  o.eval_batches = a.eval_batches;
  o.checkpoint_every = a.checkpoint_every;
  o.health_every = a.health_every;
  o.out = a.out;
  o.resume = a.resume;
  o.device = device;
  o.peak_flops = device == Device::Cuda ? a.peak_tflops * 1e12 : 0.0;
  o.comm = comm.get();
  o.zero1 = a.zero1;
  if (!lead) {  // rank 0 alone writes
    train::train_lm(o, train_stream, validation_stream);
    comm->barrier();  // until rank 0 has saved the model: a rank that ends early looks dead to it
    return;
  }
  fmt::print("Llama {}: {} parameters, {} layers, hidden {}, {} heads ({} kv), vocab {}; {} on {}\n", a.config,
             models::parameter_count(o.model), o.model.num_hidden_layers, o.model.hidden_size,
             o.model.num_attention_heads, o.model.num_key_value_heads, o.model.vocab_size, nn::name(precision),
             name(device));
  fmt::print("Data: {} training tokens, {} validation tokens; {} tokens per step ({} x {} x {})\n",
             train_stream.size(), validation_stream.size(), a.accumulation * a.batch * a.seq, a.accumulation, a.batch,
             a.seq);
  if (comm != nullptr)
    fmt::print("Data parallel: {} processes ({}, {} backend), {} of each micro-batch's sequences per process\n",
               comm->world_size(), rendezvous.source, dist::name(comm->backend()), a.batch / comm->world_size());

  train::MetricsLog log(fs::path(a.out) / "metrics.jsonl", a.resume);
  nlohmann::json run = {{"event", "run"},        {"model", "llama"},          {"config", a.config},
                        {"precision", a.precision}, {"device", a.device},     {"seq", a.seq},
                        {"batch", a.batch},         {"accumulation", a.accumulation}, {"steps", a.steps},
                        {"lr", a.lr},               {"warmup", a.warmup},     {"weight_decay", a.weight_decay},
                        {"clip", a.clip},           {"seed", a.seed},         {"resume", a.resume},
                         {"health_every", a.health_every}, {"recompute", a.recompute},
                         {"processes", rendezvous.world_size}};
  if (precision == nn::Precision::Fp8 || !linears.empty()) run.update(a.recipe.json());  // "recipe": delayed or current
  if (!linears.empty()) run["linear_recipes"] = a.linear_recipes;
  if (a.fp8_attention) run["fp8_attention"] = true;
  log.write(run);
  o.metrics = &log;
  train::LmTrainResult result = train::train_lm(o, train_stream, validation_stream);
  const fs::path model_dir = fs::path(a.out) / fmt::format("model-{}", nn::name(precision));
  models::save_pretrained(result.model, model_dir, static_cast<uint64_t>(a.max_shard_bytes));
  tokenizer.save(model_dir / kTokenizerFile);
  models::write_tokenizer_config(model_dir, tokenizer, result.model.config());
  const std::string speed =
      result.tokens_per_second > 0
          ? fmt::format("{:.0f} tokens/s{}", result.tokens_per_second,
                        result.mfu > 0 ? fmt::format(", MFU {:.1f}%", 100 * result.mfu) : "")
          : "speed not measured (no step was timed: a run's first two build its captured step)";
  fmt::print("Validation: loss {:.4f}, perplexity {:.2f}; {}\nModel: {}\nMetrics: {}\n", result.validation->loss,
             result.validation->perplexity, speed, model_dir.string(), log.path().string());
  if (comm != nullptr) comm->barrier();
}

// ---- lm eval / lm generate

struct ModelArgs {
  std::string model;
  std::string precision = "bf16";
  RecipeArgs recipe;
  std::vector<std::string> linear_recipes;
  bool fp8_attention = false;
  std::string device = "cpu";
};

struct LoadedModel {
  models::Llama model;
  text::BpeTokenizer tokenizer;
};

LoadedModel load(const ModelArgs& a) {
  const Device device = parse_device(a.device);
  if (device == Device::Cuda) require_cuda();
  models::Llama model = models::load_pretrained(a.model, device);
  text::BpeTokenizer tokenizer = text::BpeTokenizer::load(fs::path(a.model) / kTokenizerFile);
  FP8KIT_CHECK(tokenizer.vocab_size() <= model.config().vocab_size,
               "{}/{} has {} tokens but the model's vocab_size is {}: the tokenizer does not belong to the model",
               a.model, kTokenizerFile, tokenizer.vocab_size(), model.config().vocab_size);
  model.set_precision(nn::parse_precision(a.precision), a.recipe.parse(), nn::LinearRecipes::parse(a.linear_recipes));
  model.set_fp8_attention(a.fp8_attention);
  return {std::move(model), std::move(tokenizer)};
}

void add_fp8_attention_flag(CLI::App& app, bool& flag) {
  app.add_flag("--fp8-attention", flag,
               "the attention's forward in FP8 (E4M3 q, k, v at current scales, probabilities and output at fixed "
               "ones: Transformer Engine's FP8 attention; on the GPU cuDNN's, Hopper or newer; the backward stays "
               "bf16), any --precision");
}

void add_model_options(CLI::App& app, ModelArgs& a) {
  app.add_option("--model", a.model, "an HF Llama model directory with its tokenizer.json (e.g. out/lm/model-bf16)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--precision", a.precision, "fp32, bf16 or fp8")->capture_default_str();
  add_recipe_options(app, a.recipe);
  add_linear_recipe_option(app, a.linear_recipes);
  add_fp8_attention_flag(app, a.fp8_attention);
  app.add_option("--device", a.device, "cpu or cuda")->capture_default_str();
}

struct EvalArgs {
  ModelArgs model;
  int64_t seq = 256, batch = 16, batches = 0, limit = 0;
  std::string data, text;
  bool runtime = false;  // through the inference engine (bf16 or packed FP8 weights, bf16 or FP8 KV cache)
  EngineArgs engine;
};

// The IMDB test reviews, or --text's file as one document (its bytes as they are), each followed by
// <|endoftext|> as in training.
void run_eval(const EvalArgs& a) {
  const bool runtime = a.runtime || infer::is_packed(a.model.model);
  const std::vector<std::string> texts = a.text.empty() ? imdb_corpus(a.data, a.limit).validation
                                                        : std::vector<std::string>{read_text(a.text)};
  const std::string what = a.text.empty() ? "validation" : a.text;
  if (runtime) {
    const char* remedy = a.runtime ? "drop them or --runtime" : "a packed model runs on the inference engine: drop them";
    FP8KIT_CHECK(a.model.linear_recipes.empty(),
                 "--linear-recipe sets the training model's Linears, not the inference engine's: {}", remedy);
    FP8KIT_CHECK(a.model.precision == "bf16" && !a.model.fp8_attention,
                 "--precision and --fp8-attention set the training model, not the inference engine, which runs the "
                 "weights as stored (`fp8kit lm pack` makes FP8 ones): {}", remedy);
    EngineArgs args = a.engine;
    args.device = a.model.device;
    const Device device = parse_device(args.device);
    if (device == Device::Cuda) require_cuda();
    infer::LlamaEngine engine = open_engine(a.model.model, device, engine_options(args, a.batch, a.seq));
    const text::BpeTokenizer tokenizer = text::BpeTokenizer::load(fs::path(a.model.model) / kTokenizerFile);
    const std::vector<int32_t> stream = token_stream(tokenizer, texts);
    const infer::Perplexity e = infer::evaluate(engine, data::TokenWindows(stream, a.seq, 0), a.batch, a.batches);
    fmt::print("{} (runtime: {} weights, {} KV cache): {} loss {:.6f}, perplexity {:.3f} over {} tokens\n",
               a.model.model, engine.fp8_weights() ? "fp8" : "bf16", args.kv_cache, what, e.loss, e.perplexity,
               e.tokens);
    return;
  }
  FP8KIT_CHECK(a.engine.kv_cache == "bf16" && a.engine.activations == "auto",
               "--kv-cache and --activations set the inference engine: add --runtime");
  LoadedModel m = load(a.model);
  const std::vector<int32_t> stream = token_stream(m.tokenizer, texts);
  const data::TokenWindows windows(stream, a.seq, 0);
  const train::LmEvaluation e = train::evaluate_lm(m.model, windows, a.batch, a.batches);
  fmt::print("{} ({}): {} loss {:.6f}, perplexity {:.3f} over {} tokens\n", a.model.model, a.model.precision, what,
             e.loss, e.perplexity, e.tokens);
}

// ---- lm compare

// A run's label: its precision, and for FP8 the recipe ("fp8 delayed") and formats other than hybrid
// ("fp8 block e4m3"), from its metrics log's run event.
struct RunCurve {
  std::string label;
  uint64_t seed = 0;
  std::vector<double> steps, validation;
};

RunCurve read_run(const fs::path& metrics) {
  std::ifstream in(metrics);
  FP8KIT_CHECK(in.good(), "cannot read {}: give run directories of `fp8kit lm train` (their metrics.jsonl)",
               metrics.string());
  // The last run that validated (a resumed run continues its curve; one that failed before its first
  // validation, e.g. refused to resume, leaves the one before).
  RunCurve last, r;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_object() && in.eof()) break;  // an unfinished last line: a run killed (or still) writing it
    FP8KIT_CHECK(e.is_object(), "{}:{}: not a JSON object", metrics.string(), number);
    if (!e.contains("event")) continue;
    if (e["event"] == "run" && e.value("model", "") == "llama") {
      if (e.value("resume", false) && !r.validation.empty()) continue;
      if (!r.validation.empty()) last = std::move(r);
      r = {};
      r.label = e.value("precision", "?");
      if (r.label == "fp8") {
        r.label += " " + e.value("recipe", "delayed");
        if (const std::string formats = e.value("formats", "hybrid"); formats != "hybrid") r.label += " " + formats;
      }
      for (const std::string& rule : e.value("linear_recipes", std::vector<std::string>{})) r.label += " " + rule;
      if (e.value("fp8_attention", false)) r.label += " + fp8 attention";
      r.seed = e.value("seed", uint64_t{0});
    } else if (e["event"] == "validation") {
      r.steps.push_back(e.value("step", 0.0));
      r.validation.push_back(e.value("loss", NAN));
    }
  }
  if (r.validation.empty()) r = std::move(last);
  FP8KIT_CHECK(!r.label.empty() && !r.validation.empty(), "{} holds no validation of an `fp8kit lm train` run",
               metrics.string());
  return r;
}

void run_compare(const std::vector<std::string>& runs, const std::string& svg) {
  std::map<std::string, std::vector<RunCurve>> by_label;
  for (const std::string& dir : runs) {
    RunCurve r = read_run(fs::path(dir) / "metrics.jsonl");
    by_label[r.label].push_back(std::move(r));
  }
  auto stats = [](const std::vector<RunCurve>& rs) {
    double mean = 0, var = 0;
    for (const RunCurve& r : rs) mean += r.validation.back() / static_cast<double>(rs.size());
    for (const RunCurve& r : rs) var += (r.validation.back() - mean) * (r.validation.back() - mean);
    return std::pair{mean, rs.size() > 1 ? std::sqrt(var / static_cast<double>(rs.size() - 1)) : 0.0};
  };
  const auto bf16 = by_label.find("bf16");
  const double reference = bf16 != by_label.end() ? stats(bf16->second).first : NAN;
  fmt::print("{:<16} {:>5} {:>22} {:>12}\n", "run", "seeds", "final val loss (std)", "vs bf16");
  report::LinePlot plot{"Validation loss", {"step"}, {"validation loss (nats)"}, {}};
  for (const auto& [label, rs] : by_label) {
    const auto [mean, std] = stats(rs);
    fmt::print("{:<16} {:>5} {:>14.4f} ({:.4f}) {:>12}\n", label, rs.size(), mean, std,
               std::isnan(reference) ? "-" : fmt::format("{:.2f}%", 100.0 * (mean - reference) / reference));
    for (const RunCurve& r : rs)
      plot.series.push_back({fmt::format("{} seed {}", label, r.seed), r.steps, r.validation, label != "bf16"});
  }
  if (!svg.empty()) {
    report::write_svg(plot, svg);
    fmt::print("Curves: {}\n", svg);
  }
}

void setup(CLI::App& app) {
  app.require_subcommand(1);

  auto t = std::make_shared<TrainArgs>();
  CLI::App* train = app.add_subcommand("train", "Train a Llama LM on the IMDB reviews (fp32, bf16 or fp8)");
  train->add_option("--config", t->config, "a preset (tiny, 25m, gpt2-small, 1b, 8b) or a config.json")->capture_default_str();
  train->add_option("--tokenizer", t->tokenizer,
                    "tokenizer.json: read if it exists, else learned on the training text and written there "
                    "(default: OUT/tokenizer.json)");
  CLI::Option* vocab_size = train->add_option("--vocab-size", t->vocab_size, "tokens of a learned tokenizer")
      ->capture_default_str()
      ->check(whole_number(257, 1 << 20));
  train->add_option("--precision", t->precision, "fp32, bf16 (mixed) or fp8")->capture_default_str();
  add_recipe_options(*train, t->recipe);
  add_linear_recipe_option(*train, t->linear_recipes);
  add_fp8_attention_flag(*train, t->fp8_attention);
  train->add_option("--device", t->device, "cpu or cuda")->capture_default_str();
  train->add_option("--seq", t->seq, "tokens per sequence")->capture_default_str()->check(whole_number(1, 1 << 20));
  train->add_option("--batch", t->batch, "sequences per micro-batch")->capture_default_str()->check(whole_number(1, 1 << 16));
  train->add_option("--accumulation", t->accumulation, "micro-batches per optimizer step")
      ->capture_default_str()
      ->check(whole_number(1, 1 << 16));
  train->add_flag("--recompute", t->recompute,
                  "recompute each block's activations in the backward: about one block's activations in memory");
  train->add_option("--loss-chunk", t->loss_chunk,
                    "rows of logits the LM head and loss take at a time (0: about 64 MiB of float32 logits)")
      ->capture_default_str()
      ->check(whole_number(0, 1 << 30));
  train->add_option("--steps", t->steps, "optimizer steps")->capture_default_str()->check(whole_number(0, 1'000'000'000));
  train->add_option("--lr", t->lr, "peak learning rate")->capture_default_str()->check(real_number(0, 10));
  train->add_option("--warmup", t->warmup, "linear warmup steps")->capture_default_str()->check(whole_number(0, 1'000'000'000));
  train->add_option("--min-lr-ratio", t->min_lr_ratio, "the cosine decay's final learning rate / peak")
      ->capture_default_str()
      ->check(real_number(0, 1));
  train->add_option("--weight-decay", t->weight_decay, "AdamW's decoupled weight decay (not of the RMSNorm scales)")
      ->capture_default_str()
      ->check(real_number(0, 10));
  train->add_option("--clip", t->clip, "max global gradient norm (0: no clipping)")
      ->capture_default_str()
      ->check(real_number(0, 1e6));
  add_seed_option(*train, t->seed, "seed of the weights and the data order");
  train->add_option("--eval-every", t->eval_every, "steps between validations (0: at the end)")
      ->capture_default_str()
      ->check(whole_number(0, 1'000'000'000));
  train->add_option("--eval-batches", t->eval_batches, "validation micro-batches (0: all)")
      ->capture_default_str()
      ->check(whole_number(0, 1'000'000'000));
  train->add_option("--checkpoint-every", t->checkpoint_every, "steps between checkpoints (0: at the end)")
      ->capture_default_str()
      ->check(whole_number(0, 1'000'000'000));
  train->add_option("--health-every", t->health_every,
                    "record FP8 health statistics every N steps and at the last into metrics.jsonl, for `fp8kit report` (0: off)")
      ->capture_default_str()
      ->check(whole_number(0, 1'000'000'000));
  train->add_option("--out", t->out, "directory for the tokenizer, checkpoints, metrics and the model")
      ->capture_default_str()
      ->check(non_empty_path());
  train->add_flag("--resume", t->resume, "continue from the checkpoint in --out");
  train->add_option("--data", t->data, "aclImdb_v1.tar.gz or an aclImdb directory (default: searched, see README)")
      ->check(non_empty_path());
  train->add_option("--limit", t->limit, "use only N evenly spaced reviews of each split (quick checks); 0 = all")
      ->check(whole_number(0, 1'000'000'000));
  train->add_option("--peak-tflops", t->peak_tflops, "the GPU's dense bf16 peak, for MFU (H100 SXM: 989)")
      ->capture_default_str()
      ->check(real_number(1, 1e6));
  train->add_option("--procs,--gpus", t->procs,
                    "run as a data-parallel job of N processes on this host, started by this command (cuda: one "
                    "per GPU; cpu: N processes sharing the cores); under torchrun, srun or mpirun leave it out")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  train->add_option("--dist-backend", t->dist_backend,
                    "a data-parallel job's collectives: auto (nccl on cuda, tcp on the cpu), nccl or tcp")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "nccl", "tcp"}));
  train->add_flag("--zero1", t->zero1,
                 "in a data-parallel job, reduce-scatter the gradients and shard AdamW's moments and update across the "
                 "processes, then all-gather the parameters (ZeRO-1)");
  train->add_option("--dist-timeout", t->dist_timeout,
                    "seconds a rank waits for the others (to connect, in a collective) before the job ends; more "
                    "than rank 0 takes to write a checkpoint or learn the tokenizer")
      ->capture_default_str()
      ->check(whole_number(1, 1'000'000));
  train->add_option("--max-shard-size", t->max_shard_bytes,
                    "bytes of weights per model.safetensors shard, as transformers' max_shard_size")
      ->capture_default_str()
      ->check(whole_number(1, int64_t{1} << 50));
  train->callback([t, vocab_size] {
    t->vocab_size_given = vocab_size->count() > 0;
    run_train(*t);
  });

  auto e = std::make_shared<EvalArgs>();
  CLI::App* eval =
      app.add_subcommand("eval", "Loss and perplexity of a model on the IMDB test reviews or a text file");
  add_model_options(*eval, e->model);
  eval->add_option("--seq", e->seq, "tokens per sequence")->capture_default_str()->check(whole_number(1, 1 << 20));
  eval->add_option("--batch", e->batch, "sequences per batch")->capture_default_str()->check(whole_number(1, 1 << 16));
  eval->add_option("--batches", e->batches, "batches to evaluate (0: all)")->capture_default_str()->check(whole_number(0, 1'000'000'000));
  CLI::Option* data =
      eval->add_option("--data", e->data, "aclImdb_v1.tar.gz or an aclImdb directory")->check(non_empty_path());
  CLI::Option* limit =
      eval->add_option("--limit", e->limit, "use only N evenly spaced reviews")->check(whole_number(0, 1'000'000'000));
  eval->add_option("--text", e->text, "evaluate this text file (one document) instead of the IMDB test reviews")
      ->check(CLI::ExistingFile)
      ->excludes(data)
      ->excludes(limit);
  eval->add_flag("--runtime", e->runtime,
                 "evaluate through the inference engine (implied by a packed model); then --kv-cache and "
                 "--activations apply");
  eval->add_option("--kv-cache", e->engine.kv_cache, "with --runtime: bf16 or fp8")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp8"}));
  eval->add_option("--activations", e->engine.activations, "with --runtime: auto, static, dynamic or warmup")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "static", "dynamic", "warmup"}));
  eval->callback([e] { run_eval(*e); });

  add_lm_pack_command(app);
  add_lm_inference_commands(app);

  auto runs = std::make_shared<std::vector<std::string>>();
  auto svg = std::make_shared<std::string>();
  CLI::App* compare = app.add_subcommand(
      "compare", "Final validation loss of `lm train` runs by precision and recipe (mean and std over seeds), and their curves");
  compare->add_option("runs", *runs, "run directories (--out of lm train)")->required()->check(CLI::ExistingDirectory);
  compare->add_option("--svg", *svg, "write the validation curves there")->check(non_empty_path());
  compare->callback([runs, svg] { run_compare(*runs, *svg); });
}

const bool registered = register_command({"lm", "Train a Llama language model, pack it to FP8, evaluate, generate and benchmark", setup});

}  // namespace
}  // namespace fp8kit::cli
