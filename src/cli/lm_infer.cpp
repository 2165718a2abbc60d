// The `fp8kit lm` subcommands of the inference runtime: `calibrate` records the activation
// statistics that `lm pack` turns into static scales; `generate` continues prompts; `agreement`
// compares the greedy continuations of two models; `bench` measures prefill and decode speed of bf16
// and FP8 side by side.
#include "base/error.h"
#include "cli/lm_common.h"
#include "cli/options.h"
#include "infer/generate.h"
#include "infer/llama_engine.h"
#include "models/llama_config.h"
#include "quant/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>

namespace fp8kit::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

Device engine_device(const EngineArgs& a) {
  const Device device = parse_device(a.device);
  if (device == Device::Cuda) require_cuda();
  return device;
}

text::BpeTokenizer model_tokenizer(const fs::path& dir, int64_t vocab_size) {
  text::BpeTokenizer tokenizer = text::BpeTokenizer::load(dir / kTokenizerFile);
  FP8KIT_CHECK(tokenizer.vocab_size() <= vocab_size,
               "{}/{} has {} tokens but the model's vocab_size is {}: the tokenizer does not belong to the model",
               dir.string(), kTokenizerFile, tokenizer.vocab_size(), vocab_size);
  return tokenizer;
}

// Prompts as the model saw text in training: BOS (where the tokenizer has one), then the text's ids,
// cut to `max_tokens` (0: whole).
std::vector<std::vector<int32_t>> encode_prompts(const text::BpeTokenizer& tokenizer,
                                                 const std::vector<std::string>& texts, int64_t max_tokens) {
  std::vector<std::vector<int32_t>> prompts;
  const std::span<const int32_t> bos = tokenizer.bos_ids();
  for (const std::vector<int32_t>& ids : tokenizer.encode_batch(texts)) {
    std::vector<int32_t> p(bos.begin(), bos.end());
    p.insert(p.end(), ids.begin(), ids.end());
    if (max_tokens > 0 && static_cast<int64_t>(p.size()) > max_tokens) p.resize(static_cast<size_t>(max_tokens));
    if (p.size() > bos.size()) prompts.push_back(std::move(p));
  }
  return prompts;
}

// A text file's non-empty lines.
std::vector<std::string> lines_of(const fs::path& path, const std::string& option) {
  std::istringstream in(read_text(path, option));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  FP8KIT_CHECK(!lines.empty(), "{} {} has no non-empty line to use as a prompt", option, path.string());
  return lines;
}

// ---- lm calibrate

struct CalibrateArgs {
  std::string model, out, text, data;
  int64_t prompts = 512, seq = 256, batch = 16;
  std::string device = "cpu";
};

void run_calibrate(const CalibrateArgs& a) {
  EngineArgs engine_args;
  engine_args.device = a.device;
  const Device device = engine_device(engine_args);
  const models::LlamaConfig config = models::read_llama_config(a.model);
  const text::BpeTokenizer tokenizer = model_tokenizer(a.model, config.vocab_size);
  const std::vector<std::string> texts =
      a.text.empty() ? imdb_corpus(a.data, a.prompts).train : lines_of(a.text, "--text");
  std::vector<std::vector<int32_t>> prompts = encode_prompts(tokenizer, texts, a.seq);
  if (static_cast<int64_t>(prompts.size()) > a.prompts) prompts.resize(static_cast<size_t>(a.prompts));
  infer::LlamaEngine engine = open_engine(a.model, device, engine_options(engine_args, a.batch, a.seq));
  FP8KIT_CHECK(!engine.fp8_weights(), "{} is packed already: calibrate its bf16 model", a.model);
  quant::CalibrationStats stats;
  stats.source = fmt::format("{} ({} prompts of up to {} tokens from {})", a.model, prompts.size(), a.seq,
                             a.text.empty() ? "the IMDB train reviews" : a.text);
  engine.record_calibration(&stats);
  const auto start = Clock::now();
  // Batches of --batch prompts, whatever their lengths, one prefill each.
  const std::span<const std::vector<int32_t>> all(prompts);
  for (size_t i = 0; i < all.size(); i += static_cast<size_t>(a.batch))
    engine.prefill(all.subspan(i, std::min(all.size() - i, static_cast<size_t>(a.batch))));
  engine.record_calibration(nullptr);
  quant::save_calibration(a.out, stats);
  fmt::print("Calibrated {} activations over {} prompts ({} tokens) in {:.1f}s: {}\n", stats.activations.size(),
             stats.prompts, stats.tokens, seconds_since(start), a.out);
}

// ---- lm generate

struct GenerateArgs {
  std::string model;
  std::vector<std::string> prompts;
  std::string prompts_file;
  int64_t max_new_tokens = 64;
  infer::SamplingOptions sampling;
  EngineArgs engine;
  bool stats = false;
};

void run_generate(const GenerateArgs& a) {
  const Device device = engine_device(a.engine);
  const models::LlamaConfig config = models::read_llama_config(a.model);
  const text::BpeTokenizer tokenizer = model_tokenizer(a.model, config.vocab_size);
  std::vector<std::string> texts = a.prompts;
  if (!a.prompts_file.empty()) {
    const std::vector<std::string> lines = lines_of(a.prompts_file, "--prompts");
    texts.insert(texts.end(), lines.begin(), lines.end());
  }
  FP8KIT_CHECK(!texts.empty(), "give a prompt, or --prompts FILE with one prompt per line");
  const std::vector<std::vector<int32_t>> prompts = encode_prompts(tokenizer, texts, 0);
  FP8KIT_CHECK(prompts.size() == texts.size(), "a prompt encodes to no tokens: give some text");
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  FP8KIT_CHECK(longest < config.max_position_embeddings,
               "the longest prompt has {} tokens, which leaves none of the model's {} positions to generate: "
               "shorten it", longest, config.max_position_embeddings);
  FP8KIT_CHECK(longest + a.max_new_tokens <= config.max_position_embeddings,
               "the longest prompt's {} tokens and --max-new-tokens {} pass the model's {} positions: give "
               "--max-new-tokens {} or less",
               longest, a.max_new_tokens, config.max_position_embeddings, config.max_position_embeddings - longest);
  infer::LlamaEngine engine = open_engine(
      a.model, device, engine_options(a.engine, static_cast<int64_t>(prompts.size()), longest + a.max_new_tokens));
  infer::GenerationOptions o{.max_new_tokens = a.max_new_tokens,
                             .sampling = a.sampling,
                             .eos = tokenizer.eos_id().value_or(-1),
                             .vocabulary = tokenizer.vocab_size()};
  const bool stream = texts.size() == 1;
  if (stream) {
    fmt::print("{}", texts[0]);
    std::fflush(stdout);
  }
  const auto start = Clock::now();
  const auto out = infer::generate(engine, prompts, o, [&](size_t, int32_t token) {
    if (!stream) return;
    fmt::print("{}", tokenizer.decode(std::span<const int32_t>(&token, 1)));
    std::fflush(stdout);
  });
  const double seconds = seconds_since(start);
  if (stream) fmt::print("\n");
  int64_t tokens = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    tokens += static_cast<int64_t>(out[i].size());
    if (!stream) fmt::print("[{}] {}{}\n", i, texts[i], tokenizer.decode(out[i]));
  }
  std::fflush(stdout);  // the text before the statistics, also where both streams go to one pipe
  if (a.stats)
    fmt::print(stderr, "{} tokens in {:.2f}s ({:.0f} tokens/s, {} weights, {} KV cache)\n", tokens, seconds,
             static_cast<double>(tokens) / seconds, engine.fp8_weights() ? "FP8" : "bf16", a.engine.kv_cache);
}

// ---- lm agreement

// Each row's argmax among its first `vocabulary` logits (the tokenizer's ids).
std::vector<int32_t> argmax_within(infer::LlamaEngine& engine, const Tensor& logits, int64_t vocabulary) {
  const int64_t n = logits.dim(1);
  if (vocabulary >= n) return engine.argmax(logits);
  const Tensor host = logits.to(Device::Cpu);
  std::vector<int32_t> ids(static_cast<size_t>(logits.dim(0)));
  for (size_t r = 0; r < ids.size(); ++r) {
    const float* row = host.data<float>() + static_cast<int64_t>(r) * n;
    ids[r] = static_cast<int32_t>(std::max_element(row, row + vocabulary) - row);
  }
  return ids;
}

struct AgreementArgs {
  std::string reference, model, data;
  int64_t prompts = 100, prompt_tokens = 32, tokens = 64;
  EngineArgs engine;
};

void run_agreement(const AgreementArgs& a) {
  const Device device = engine_device(a.engine);
  const models::LlamaConfig config = models::read_llama_config(a.reference);
  const text::BpeTokenizer tokenizer = model_tokenizer(a.reference, config.vocab_size);
  const std::vector<std::vector<int32_t>> prompts =
      encode_prompts(tokenizer, imdb_corpus(a.data, a.prompts).validation, a.prompt_tokens);
  const auto batch = static_cast<int64_t>(prompts.size());
  const int64_t max_seq = a.prompt_tokens + a.tokens;
  // Greedy, no early stop: a.tokens tokens each.
  const infer::GenerationOptions o{.max_new_tokens = a.tokens, .vocabulary = tokenizer.vocab_size()};
  auto open = [&](const std::string& dir, const EngineArgs& args) {
    return open_engine(dir, device, engine_options(args, batch, max_seq));
  };
  EngineArgs bf16_args;
  bf16_args.device = a.engine.device;
  std::vector<std::vector<int32_t>> expected;
  {
    infer::LlamaEngine reference = open(a.reference, bf16_args);
    expected = infer::generate(reference, prompts, o);
  }  // its memory is free before the model loads
  infer::LlamaEngine engine = open(a.model, a.engine);
  const auto got = infer::generate(engine, prompts, o);
  // Free-running: the two greedy continuations position by position (one flipped near-tie changes the
  // rest). Teacher-forced: the model's argmax at each position of the reference's continuation.
  int64_t same = 0, identical = 0, forced = 0;
  double prefix = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    int64_t common = 0;
    while (common < a.tokens && expected[i][static_cast<size_t>(common)] == got[i][static_cast<size_t>(common)])
      ++common;
    for (int64_t t = 0; t < a.tokens; ++t)
      same += expected[i][static_cast<size_t>(t)] == got[i][static_cast<size_t>(t)];
    prefix += static_cast<double>(common) / static_cast<double>(batch);
    identical += common == a.tokens;
    std::vector<int32_t> sequence = prompts[i];
    sequence.insert(sequence.end(), expected[i].begin(), expected[i].end() - 1);
    const auto n = static_cast<int64_t>(sequence.size());
    const std::vector<int32_t> next =
        argmax_within(engine, engine.prefill(sequence, 1, n, 0, true), tokenizer.vocab_size());
    const int64_t first = static_cast<int64_t>(prompts[i].size()) - 1;
    for (int64_t t = 0; t < a.tokens; ++t)
      forced += next[static_cast<size_t>(first + t)] == expected[i][static_cast<size_t>(t)];
  }
  const double total = static_cast<double>(batch * a.tokens);
  fmt::print("{} vs {} ({} KV cache), the first {} greedy tokens of {} prompts: {:.1f}% agree free-running "
             "(common prefix {:.1f} tokens on average, {} continuations identical), {:.1f}% teacher-forced\n",
             a.model, a.reference, a.engine.kv_cache, a.tokens, batch, 100.0 * static_cast<double>(same) / total,
             prefix, identical, 100.0 * static_cast<double>(forced) / total);
}

// ---- lm bench

struct BenchArgs {
  std::string config = "8b";
  int64_t vocab_size = 128256;
  std::string weights = "bf16,fp8";
  std::string granularity = "tensor";
  std::vector<std::string> prefill{"8x2048"};
  std::vector<std::string> decode{"1x512", "64x2048"};
  int64_t iterations = 5, decode_steps = 32;
  std::string device = "cuda";
  std::string activations = "warmup";
};

std::pair<int64_t, int64_t> shape_of(const std::string& text) {
  const size_t x = text.find('x');
  FP8KIT_CHECK(x != std::string::npos, "a shape is BATCHxTOKENS (e.g. 8x2048), not \"{}\"", text);
  try {
    const int64_t batch = std::stoll(text.substr(0, x)), tokens = std::stoll(text.substr(x + 1));
    FP8KIT_CHECK(batch >= 1 && tokens >= 1, "a shape's batch and tokens must be >= 1: \"{}\"", text);
    return {batch, tokens};
  } catch (const std::logic_error&) {
    fail("a shape is BATCHxTOKENS (e.g. 8x2048), not \"{}\"", text);
  }
}

// Device-to-device copy bandwidth (bytes/s), the bound decode steps are held to: a 1 GiB buffer on
// the GPU (20x the H100's L2; each copy waits for its end, which costs it ~1%), 64 MiB on the CPU.
double copy_bandwidth(Device device) {
  const int64_t n = device == Device::Cuda ? int64_t{1} << 30 : int64_t{1} << 26;
  Tensor a({n}, DType::E4M3, device), b({n}, DType::E4M3, device);
  b.copy_from(a);
  const auto start = Clock::now();
  for (int i = 0; i < 5; ++i) b.copy_from(a);
  return 2.0 * 5.0 * static_cast<double>(n) / seconds_since(start);  // read + write
}

void run_bench(const BenchArgs& a) {
  EngineArgs engine_args;
  engine_args.device = a.device;
  engine_args.activations = a.activations;
  engine_args.warm_up = 1;
  const Device device = engine_device(engine_args);
  std::vector<std::string> weights;
  std::stringstream weights_list(a.weights);
  for (std::string w; std::getline(weights_list, w, ',');) {
    FP8KIT_CHECK(w == "bf16" || w == "fp8", "--weights takes bf16 and fp8, not \"{}\"", w);
    weights.push_back(w);
  }
  models::LlamaConfig config = is_config_path(a.config) ? models::read_llama_config(a.config)
                                                    : models::llama_preset(a.config, a.vocab_size);
  std::vector<std::pair<int64_t, int64_t>> prefills, decodes;
  int64_t max_batch = 1, max_seq = 1;
  for (const auto& s : a.prefill) prefills.push_back(shape_of(s));
  for (const auto& s : a.decode) decodes.push_back(shape_of(s));
  for (auto [b, t] : prefills) max_batch = std::max(max_batch, b), max_seq = std::max(max_seq, t);
  for (auto [b, t] : decodes) max_batch = std::max(max_batch, b), max_seq = std::max(max_seq, t + a.decode_steps + 4);
  FP8KIT_CHECK(max_seq <= config.max_position_embeddings, "the shapes need {} positions; the model has {}", max_seq,
               config.max_position_embeddings);
  const double bandwidth = copy_bandwidth(device);
  // Bytes in GB, or MB or KB where fewer.
  const auto size = [](int64_t bytes) {
    const auto b = static_cast<double>(bytes);
    return b >= 1e9   ? fmt::format("{:.2f}G", b / 1e9)
           : b >= 1e6 ? fmt::format("{:.2f}M", b / 1e6)
                      : fmt::format("{:.1f}K", b / 1e3);
  };
  const auto parameters = static_cast<double>(models::parameter_count(config));
  fmt::print("Llama {} ({} parameters), random weights, on {}; copy bandwidth {:.0f} GB/s\n", a.config,
             parameters >= 1e9 ? fmt::format("{:.2f}B", parameters / 1e9) : fmt::format("{:.2f}M", parameters / 1e6),
             name(device), bandwidth / 1e9);
  fmt::print("{:<6} {:>9} {:>9} {:>12} {:>12} {:>10} {:>9}\n", "model", "weights", "KV cache", "shape", "tokens/s",
             "ms", "vs bf16");
  std::map<std::string, double> bf16_rate;
  for (const std::string& w : weights) {
    EngineArgs args = engine_args;
    args.kv_cache = w == "fp8" ? "fp8" : "bf16";
    const infer::RandomWeights random{.fp8 = w == "fp8",
                                      .granularity = a.granularity == "channel" ? Granularity::PerRow
                                                                                : Granularity::PerTensor};
    infer::LlamaEngine engine =
        infer::LlamaEngine::random(config, random, 1, device, engine_options(args, max_batch, max_seq));
    ops::Context& c = engine.context();
    // One shape's figures: tokens/s, milliseconds per prefill (its time to first token) or decode step,
    // and the ratio to bf16's.
    auto report = [&](const std::string& what, double tokens, double seconds, double bound_rate) {
      const double rate = tokens / seconds;
      if (w == "bf16") bf16_rate[what] = rate;
      const auto base = bf16_rate.find(what);
      fmt::print("{:<6} {:>9} {:>9} {:>12} {:>12.0f} {:>10.2f} {:>9}{}\n", w, size(engine.weight_bytes()),
                 size(engine.kv_cache_bytes()),
                 what, rate, 1e3 * seconds,
                 base != bf16_rate.end() && w != "bf16" ? fmt::format("{:.2f}x", rate / base->second) : "",
                 bound_rate > 0 ? fmt::format("  ({:.0f}% of the weight-read bound)", 100 * rate / bound_rate) : "");
    };
    for (auto [b, t] : prefills) {
      std::vector<int32_t> tokens(static_cast<size_t>(b * t));
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919) % config.vocab_size);
      engine.prefill(tokens, b, t);  // warm-up (and the FP8 scales' warm-up pass)
      c.synchronize();
      const auto start = Clock::now();
      for (int64_t i = 0; i < a.iterations; ++i) engine.prefill(tokens, b, t);
      c.synchronize();
      const double seconds = seconds_since(start) / static_cast<double>(a.iterations);
      report(fmt::format("prefill {}x{}", b, t), static_cast<double>(b * t), seconds, 0);
    }
    for (auto [b, t] : decodes) {
      std::vector<int32_t> tokens(static_cast<size_t>(b), 1);
      engine.assume_cached(t);
      for (int i = 0; i < 3; ++i) engine.decode(tokens);  // eager, captured, replayed
      c.synchronize();
      const auto start = Clock::now();
      for (int64_t i = 0; i < a.decode_steps; ++i) engine.decode(tokens);
      c.synchronize();
      const double seconds = seconds_since(start) / static_cast<double>(a.decode_steps);
      // The bound: every weight but the embedding table read once per step at the copy bandwidth.
      const double read = static_cast<double>(engine.weight_bytes()) -
                          static_cast<double>(config.vocab_size * config.hidden_size * 2) *
                              (config.tie_word_embeddings ? 0.0 : 1.0);
      report(fmt::format("decode {}x{}", b, t), static_cast<double>(b), seconds,
             b == 1 ? bandwidth / read : 0);
    }
  }
}

}  // namespace

void add_lm_inference_commands(CLI::App& app) {
  auto cal = std::make_shared<CalibrateArgs>();
  CLI::App* calibrate = app.add_subcommand(
      "calibrate", "Record activation amaxes and histograms of a bf16 model over prompts, for `lm pack`");
  calibrate->add_option("--model", cal->model, "an HF Llama model directory with its tokenizer.json")
      ->required()
      ->check(CLI::ExistingDirectory);
  calibrate->add_option("--out", cal->out, "the statistics file to write (safetensors)")
      ->required()
      ->check(non_empty_path());
  calibrate->add_option("--prompts", cal->prompts, "prompts to run")
      ->capture_default_str()
      ->check(whole_number(1, 1 << 24));
  calibrate->add_option("--seq", cal->seq, "tokens per prompt (longer ones are cut)")
      ->capture_default_str()
      ->check(whole_number(1, 1 << 20));
  calibrate->add_option("--batch", cal->batch, "prompts per prefill")
      ->capture_default_str()
      ->check(whole_number(1, 1 << 16));
  CLI::Option* text = calibrate->add_option("--text", cal->text, "prompts from this file, one per line")
                          ->check(CLI::ExistingFile);
  calibrate->add_option("--data", cal->data, "aclImdb_v1.tar.gz or an aclImdb directory (the default prompts: "
                                             "evenly spaced train reviews)")
      ->check(non_empty_path())
      ->excludes(text);
  calibrate->add_option("--device", cal->device, "cpu or cuda")->capture_default_str();
  calibrate->callback([cal] { run_calibrate(*cal); });

  auto g = std::make_shared<GenerateArgs>();
  CLI::App* generate = app.add_subcommand("generate", "Continue prompts with a bf16 or packed FP8 model");
  generate->add_option("--model", g->model, "an HF Llama model directory, bf16 or packed (lm pack)")
      ->required()
      ->check(CLI::ExistingDirectory);
  generate->add_option("prompt", g->prompts, "the text(s) to continue (one is streamed as it is generated)");
  generate->add_option("--prompts", g->prompts_file, "a file of prompts, one per line, generated as one batch")
      ->check(CLI::ExistingFile);
  generate->add_option("--max-new-tokens", g->max_new_tokens, "tokens to generate")
      ->capture_default_str()
      ->check(whole_number(1, 1'000'000));
  generate->add_option("--temperature", g->sampling.temperature, "0: greedy")
      ->capture_default_str()
      ->check(real_number(0, 100));
  generate->add_option("--top-k", g->sampling.top_k, "sample from the k most likely (0: all)")
      ->capture_default_str()
      ->check(whole_number(0, 1 << 30));
  generate->add_option("--top-p", g->sampling.top_p, "sample from the nucleus of probability p")
      ->capture_default_str()
      ->check(real_number(1e-6, 1));
  add_seed_option(*generate, g->sampling.seed, "seed of the sampling");
  add_engine_options(*generate, g->engine);
  generate->add_flag("--stats", g->stats, "print the tokens generated and their rate to stderr");
  generate->callback([g] { run_generate(*g); });

  auto ag = std::make_shared<AgreementArgs>();
  CLI::App* agreement = app.add_subcommand(
      "agreement", "How often a model's greedy continuations of IMDB test reviews match a bf16 reference's");
  agreement->add_option("--reference", ag->reference, "the bf16 model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  agreement->add_option("--model", ag->model, "the model to compare (packed FP8, or bf16 with --kv-cache fp8)")
      ->required()
      ->check(CLI::ExistingDirectory);
  agreement->add_option("--prompts", ag->prompts, "reviews to continue")
      ->capture_default_str()
      ->check(whole_number(1, 4096));
  agreement->add_option("--prompt-tokens", ag->prompt_tokens, "tokens of each review to start from")
      ->capture_default_str()
      ->check(whole_number(1, 1 << 20));
  agreement->add_option("--tokens", ag->tokens, "greedy tokens to compare")
      ->capture_default_str()
      ->check(whole_number(1, 1 << 20));
  agreement->add_option("--data", ag->data, "aclImdb_v1.tar.gz or an aclImdb directory")->check(non_empty_path());
  add_engine_options(*agreement, ag->engine);
  agreement->callback([ag] { run_agreement(*ag); });

  auto b = std::make_shared<BenchArgs>();
  CLI::App* bench = app.add_subcommand(
      "bench", "Prefill and decode speed of bf16 and FP8 (weights and KV cache) side by side, on random weights");
  bench->add_option("--config", b->config, "a preset (e.g. 8b: Llama-3-8B's shapes) or a config.json")
      ->capture_default_str();
  bench->add_option("--vocab-size", b->vocab_size, "a preset's vocabulary")
      ->capture_default_str()
      ->check(whole_number(1, 1 << 24));
  bench->add_option("--weights", b->weights, "bf16, fp8 or both (bf16,fp8)")->capture_default_str();
  bench->add_option("--granularity", b->granularity, "FP8 weight scales: tensor or channel")
      ->capture_default_str()
      ->check(CLI::IsMember({"tensor", "channel"}));
  bench->add_option("--prefill", b->prefill, "prefill shapes BATCHxTOKENS")->capture_default_str();
  bench->add_option("--decode", b->decode, "decode shapes BATCHxCONTEXT")->capture_default_str();
  bench->add_option("--iterations", b->iterations, "timed prefills per shape")
      ->capture_default_str()
      ->check(whole_number(1, 1000));
  bench->add_option("--decode-steps", b->decode_steps, "timed decode steps per shape")
      ->capture_default_str()
      ->check(whole_number(1, 100000));
  bench->add_option("--activations", b->activations, "FP8 activation scales: warmup (static after one pass) or dynamic")
      ->capture_default_str()
      ->check(CLI::IsMember({"warmup", "dynamic"}));
  bench->add_option("--device", b->device, "cpu or cuda")->capture_default_str();
  bench->callback([b] { run_bench(*b); });
}

}  // namespace fp8kit::cli
