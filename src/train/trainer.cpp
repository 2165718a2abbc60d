// The training loop: batches from data::Batcher (order a function of (seed, epoch)), forward /
// backward / Adam per step on the model's device (a captured graph per batch size on the GPU), validation and an atomic checkpoint per epoch, exact resume.
#include "train/trainer.h"

#include "base/error.h"
#include "base/version.h"
#include "data/batcher.h"
#include "exec/captured_step.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "numerics/format.h"
#include "ops/tensor_checks.h"
#include "train/health.h"
#include "train/progress.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <map>

namespace fp8kit::train {

namespace {

std::string recipe_text(const TrainOptions& options) {
  if (options.precision != nn::Precision::Fp8) return "none";
  return describe(options.recipe);
}

constexpr const char* kRecipeOptions =
    "--recipe/--lag/--amax-history/--amax-algo/--margin/--formats/--power-of-two-scales/--skip-zero-amax";

// The training set's token ids and labels, hashed (FNV-1a, 64 bits): another --data, --vocab or --limit
// with the same number of examples gives other ids, which a resumed model would read as other words.
std::string fingerprint(const TokenDataset& data) {
  uint64_t hash = 14695981039346656037ull;
  auto add = [&hash](std::span<const std::byte> bytes) {
    for (std::byte b : bytes) hash = (hash ^ static_cast<uint64_t>(b)) * 1099511628211ull;
  };
  add(std::as_bytes(std::span(data.tokens)));
  add(std::as_bytes(std::span(data.labels)));
  return fmt::format("fnv1a64:{:016x}", hash);
}

// What a checkpoint must agree on to continue this run, with the option that sets each value.
std::vector<io::MetadataRequirement> run_identity(const TrainOptions& options, const TokenDataset& train_data) {
  const int64_t train_examples = train_data.size();
  const auto& c = options.model;
  const nlohmann::json config = {{"vocabulary_size", c.vocabulary_size}, {"sequence_length", c.sequence_length},
                                 {"hidden_dim", c.hidden_dim},           {"num_heads", c.num_heads},
                                 {"intermediate_dim", c.intermediate_dim}, {"dropout", c.dropout}};
  const auto& a = options.adam;
  const nlohmann::json adam = {{"learning_rate", a.learning_rate}, {"beta1", a.beta1}, {"beta2", a.beta2},
                               {"epsilon", a.epsilon}};
  return {{"model", "seed_classifier", "the model"},
          {"model_config", config.dump(), "the model configuration"},
          {"precision", std::string(nn::name(options.precision)), "--precision"},
          {"recipe", recipe_text(options), kRecipeOptions},
          {"seed", std::to_string(options.seed), "--seed"},
          {"batch_size", std::to_string(options.batch_size), "--batch-size"},
          {"train_examples", std::to_string(train_examples), "a training set of size"},
          // Checkpoints written before it was recorded lack it; they resume as before.
          {"train_data", fingerprint(train_data), "the training data (the tokens of --data, --vocab and --limit)",
           /*may_be_absent=*/true},
          {"optimizer", "adam " + adam.dump(), "the optimizer"}};
}

// Every tensor a checkpoint holds: weights (their own names), Adam state ("optimizer/..."), and the
// FP8 scales and amax histories (named by layer path).
std::vector<nn::StateTensor> checkpoint_tensors(models::SeedClassifier& model, optim::Adam& adam) {
  std::vector<nn::StateTensor> tensors;
  for (nn::Parameter* p : model.parameters()) tensors.push_back({p->name, p->shape, &p->value});
  for (nn::StateTensor& t : adam.state()) tensors.push_back({"optimizer/" + t.name, t.shape, t.tensor, t.domain});
  for (nn::StateTensor& t : model.fp8_state()) tensors.push_back(t);
  return tensors;
}

void check_dataset(const TokenDataset& data, const models::SeedClassifierConfig& config, std::string_view what) {
  FP8KIT_CHECK(data.size() > 0, "the {} set is empty", what);
  FP8KIT_CHECK(data.sequence_length == config.sequence_length,
               "the {} set has sequences of {} tokens but the model takes {}", what, data.sequence_length,
               config.sequence_length);
  FP8KIT_CHECK(static_cast<int64_t>(data.tokens.size()) == data.size() * data.sequence_length,
               "the {} set holds {} token ids, expected {} examples x {}", what, data.tokens.size(), data.size(),
               data.sequence_length);
  const auto [lo, hi] = std::minmax_element(data.tokens.begin(), data.tokens.end());
  FP8KIT_CHECK(*lo >= 0 && *hi < config.vocabulary_size,
               "the {} set has token ids in [{}, {}] but the vocabulary has {} ids", what, *lo, *hi,
               config.vocabulary_size);
}

std::string abbreviate(std::span<const float> values) {
  constexpr size_t kShown = 8;
  if (values.size() == 1) return fmt::format("{}", values[0]);
  const auto nonzero = std::count_if(values.begin(), values.end(), [](float v) { return v != 0.0f; });
  const auto shown = values.first(std::min(values.size(), kShown));
  return fmt::format("[{}{}] ({} values, {} nonzero)", fmt::join(shown, ", "), values.size() > kShown ? ", ..." : "",
                     values.size(), nonzero);
}

// The seed's inspection: the query layer's scales and amax histories, then the quantized layers.
void print_fp8_state(std::FILE* out, models::SeedClassifier& model, std::string_view when) {
  if (out == nullptr) return;
  if (model.precision() != nn::Precision::Fp8) {
    fmt::print(out, "FP8 state {}: none (precision {})\n", when, nn::name(model.precision()));
    return;
  }
  fmt::print(out, "FP8 state of the query layer {}:\n", when);
  model.context().synchronize();
  const nn::HostState state(model.fp8_state());
  for (const nn::StateEntry& entry : state.entries()) {
    if (entry.name.find("/query/") == std::string::npos) continue;
    fmt::print(out, "  {}: {}\n", entry.name, abbreviate(entry.data));
  }
  const Fp8Recipe& recipe = model.recipe();
  fmt::print(out, "FP8 recipe: {}\n", describe(recipe));
  fmt::print(out, "Quantized layers:\n");
  for (const std::string& layer : model.quantized_layers()) {
    fmt::print(out, "  {}: float8_from_mixed_bfloat16 ({} inputs and kernel, {} output gradients)\n", layer,
               name(recipe.forward_format), name(recipe.backward_format));
  }
}

// Why the state cannot be checkpointed (the first value outside its entry's domain), or "" when it can.
std::string invalid_state(std::span<const nn::StateEntry> entries) {
  for (const nn::StateEntry& e : entries) {
    const auto bad = std::find_if(e.data.begin(), e.data.end(), [&](float v) { return !nn::in_domain(v, e.domain); });
    if (bad != e.data.end()) {
      return fmt::format("\"{}\" became {} at index {} (it must be {})", e.name, *bad, bad - e.data.begin(),
                         nn::requirement(e.domain));
    }
  }
  return "";
}

// The epoch count a checkpoint records, which must be a whole number in [0, epochs].
int parse_epoch(const io::Metadata& metadata, const std::filesystem::path& checkpoint, int epochs) {
  const auto found = metadata.find("epoch");
  FP8KIT_CHECK(found != metadata.end(), "checkpoint {} does not record the number of epochs it was trained for",
               checkpoint.string());
  const std::string& text = found->second;
  int epoch = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), epoch);
  FP8KIT_CHECK(!text.empty() && error == std::errc() && end == text.data() + text.size() && epoch >= 0,
               "checkpoint {} records epoch \"{}\", which is not a whole number of epochs; the file is corrupt",
               checkpoint.string(), io::printable(text));
  FP8KIT_CHECK(epoch <= epochs, "checkpoint {} was saved after epoch {}, beyond --epochs {}", checkpoint.string(),
               epoch, epochs);
  return epoch;
}

std::string last_good(const std::optional<std::filesystem::path>& checkpoint) {
  return checkpoint ? fmt::format("last good checkpoint: {}", checkpoint->string())
                    : std::string("no checkpoint was written yet");
}

nlohmann::json evaluation_json(const Evaluation& e, std::string_view prefix) {
  return {{std::string(prefix) + "loss", e.loss}, {std::string(prefix) + "accuracy", e.accuracy}};
}

}  // namespace

std::filesystem::path checkpoint_path(const std::filesystem::path& out, nn::Precision precision) {
  return out / fmt::format("checkpoint-{}.safetensors", nn::name(precision));
}

Evaluation evaluate(models::SeedClassifier& model, const TokenDataset& data, int batch_size) {
  FP8KIT_CHECK(batch_size > 0, "the batch size must be positive, not {}", batch_size);
  check_dataset(data, model.config(), "evaluation");
  double loss_sum = 0;
  int64_t correct = 0;
  const int64_t n = data.size(), length = data.sequence_length;
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    const int batch = static_cast<int>(std::min<int64_t>(batch_size, n - begin));
    const auto tokens = std::span(data.tokens).subspan(begin * length, batch * length);
    const std::span<const float> probabilities = model.forward(tokens, batch, /*training=*/false, /*step=*/0);
    for (int i = 0; i < batch; ++i) {
      const double label = data.labels[begin + i];
      const double p = std::clamp(static_cast<double>(probabilities[i]), 1e-7, 1.0 - 1e-7);
      loss_sum -= label * std::log(p) + (1.0 - label) * std::log(1.0 - p);
      correct += (probabilities[i] > 0.5f) == (label > 0.5);
    }
  }
  return {loss_sum / static_cast<double>(n), static_cast<double>(correct) / static_cast<double>(n)};
}

namespace {

// The training steps of one run: a batch copied into tensors on the model's device, then forward,
// backward, Adam and the step counter, run eagerly on the CPU and as a captured graph (one per batch
// size) on the GPU.
class Stepper {
 public:
  Stepper(models::SeedClassifier& model, optim::Adam& adam) : model_(model), adam_(adam) {}

  struct Result {
    float loss = 0;  // NaN when the probabilities hold a NaN (the loss's clip would hide it)
    std::span<const float> probabilities;
  };

  // record: the step also records the FP8 health statistics (another captured graph than a plain step's).
  Result step(std::span<const int32_t> host_tokens, std::span<const float> host_labels, int batch, int64_t step,
              bool record) {
    ops::Context& c = model_.context();
    const int64_t T = model_.config().sequence_length;
    // In place on the model's device: a captured step reads them there.
    ops::sized(tokens_, {batch, T}, DType::I32, model_.device());
    tokens_.copy_from_host(host_tokens.data());
    ops::sized(labels_, {batch}, DType::F32, model_.device());
    labels_.copy_from_host(host_labels.data());
    if (c.step() != static_cast<uint64_t>(step)) c.set_step(static_cast<uint64_t>(step));
    auto [it, fresh] = steps_.try_emplace({batch, record}, [this, record](ops::Context& context) {
      ops::ScalingTable* scaling = model_.scaling();
      if (scaling != nullptr) scaling->set_recording(record);
      model_.forward_backward(tokens_, labels_);
      adam_.step(context, /*advance_step=*/true);
      if (scaling != nullptr) scaling->set_recording(false);
    });
    it->second.run(c);
    c.synchronize();
    // The probabilities of this batch: a replayed graph wrote `batch` of them, whatever size the host
    // last gave the tensor (an evaluation or another batch size's graph in between).
    const Tensor probs = model_.probabilities().view(0, {batch}).to(Device::Cpu);
    probabilities_.assign(probs.data<float>(), probs.data<float>() + probs.numel());
    float loss = model_.loss().to(Device::Cpu).data<float>()[0];
    if (std::any_of(probabilities_.begin(), probabilities_.end(), [](float p) { return std::isnan(p); })) loss = NAN;
    return {loss, probabilities_};
  }

 private:
  models::SeedClassifier& model_;
  optim::Adam& adam_;
  Tensor tokens_, labels_;
  std::map<std::pair<int, bool>, exec::CapturedStep> steps_;
  std::vector<float> probabilities_;
};

}  // namespace

TrainResult train(const TrainOptions& options, const TokenDataset& train_data, const TokenDataset* validation,
                  const TokenDataset* test) {
  FP8KIT_CHECK(options.epochs >= 0, "--epochs must be at least 0, not {}", options.epochs);
  FP8KIT_CHECK(options.batch_size > 0, "--batch-size must be positive, not {}", options.batch_size);
  check_dataset(train_data, options.model, "training");
  if (validation) check_dataset(*validation, options.model, "validation");
  if (test) check_dataset(*test, options.model, "test");
  std::FILE* out = options.console;
  const std::string precision(nn::name(options.precision));

  TrainResult result{models::SeedClassifier(options.model, options.seed, options.device), {}, {}, {}};
  models::SeedClassifier& model = result.model;
  model.set_precision(options.precision, options.recipe);
  optim::Adam adam(model.parameter_set(), options.adam);
  ops::Context& context = model.context();
  nn::HostState state(checkpoint_tensors(model, adam));  // the checkpoint's view of the model's state
  Stepper stepper(model, adam);

  const std::vector<io::MetadataRequirement> identity = run_identity(options, train_data);
  data::Batcher batcher(train_data.size(), options.batch_size, options.seed);
  const int64_t steps_per_epoch = batcher.num_batches();
  int start_epoch = 0;
  const std::filesystem::path checkpoint = options.out.empty() ? "" : checkpoint_path(options.out, options.precision);
  FP8KIT_CHECK(!options.resume || !options.out.empty(), "--resume needs --out, the directory holding the checkpoint");
  // A run killed while writing a checkpoint leaves its temporary file; no writer of ours is running now.
  if (!checkpoint.empty()) io::remove_stale_temporary_files(checkpoint);
  const bool has_checkpoint = options.resume && std::filesystem::symlink_status(checkpoint).type() !=
                                                    std::filesystem::file_type::not_found;
  if (options.resume && !has_checkpoint) {
    if (out) fmt::print(out, "No checkpoint {} yet: {} starts from the beginning\n", checkpoint.string(), precision);
  } else if (options.resume) {
    const io::Metadata metadata = io::load_checkpoint(checkpoint, state.entries(), identity);
    state.push();
    if (ops::ScalingTable* scaling = model.scaling()) scaling->restored(context);
    start_epoch = parse_epoch(metadata, checkpoint, options.epochs);
    FP8KIT_CHECK(adam.iterations() == start_epoch * steps_per_epoch,
                 "checkpoint {} records epoch {} but its optimizer made {} steps, not {}", checkpoint.string(),
                 start_epoch, adam.iterations(), start_epoch * steps_per_epoch);
    result.checkpoint = checkpoint;
    if (out) fmt::print(out, "Resumed {} from {} after epoch {}\n", precision, checkpoint.string(), start_epoch);
    // A finished run: evaluating the test set again would only log its result a second time. (A kill
    // before the test line landed leaves the evaluation to this resume.)
    if (start_epoch == options.epochs && test && options.metrics && options.metrics->holds("test", precision)) {
      if (out) {
        fmt::print(out, "{} already ran to --epochs {} and its test result is in {}; pass --epochs {} or more with "
                   "--resume to train on\n", precision, options.epochs, options.metrics->path().string(),
                   options.epochs + 1);
      }
      return result;
    }
  }
  // Lines of epochs after the checkpoint's were written by a run killed before their checkpoint landed.
  if (options.resume && options.metrics) options.metrics->forget_epochs_after(precision, start_epoch);
  if (options.inspect_fp8) print_fp8_state(out, model, "before training");

  // Health statistics need an FP8 model with per-tensor scales (block scaling keeps no slots) and a log.
  const bool health = options.health_every > 0 && options.metrics != nullptr && model.scaling() != nullptr &&
                      model.scaling()->size() > 0;
  std::vector<nlohmann::json> health_events;  // this epoch's, written with its line
  std::vector<int32_t> batch_tokens;
  std::vector<float> batch_labels;
  for (int epoch = start_epoch; epoch < options.epochs; ++epoch) {
    if (out) fmt::print(out, "Epoch {}/{}\n", epoch + 1, options.epochs);
    ProgressBar bar(steps_per_epoch, out);
    const auto epoch_start = std::chrono::steady_clock::now();
    batcher.start_epoch(epoch);
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    for (int64_t b = 0; b < steps_per_epoch; ++b) {
      const int64_t step = epoch * steps_per_epoch + b;
      const std::span<const int64_t> rows = batcher.batch(b);
      const int batch = static_cast<int>(rows.size());
      batch_tokens.resize(rows.size() * train_data.sequence_length);
      batch_labels.resize(rows.size());
      data::gather_rows<int32_t>(train_data.tokens, train_data.sequence_length, rows, batch_tokens);
      data::gather_rows<float>(train_data.labels, 1, rows, batch_labels);
      if (options.before_step) options.before_step(model, step);

      const bool record = health && records_health(options.health_every, step + 1, options.epochs * steps_per_epoch);
      const auto [loss, probabilities] = stepper.step(batch_tokens, batch_labels, batch, step, record);
      if (record) {
        nlohmann::json event = health_event(*model.scaling(), model.scaling()->read_records(context));
        event.update(nlohmann::json{{"precision", precision}, {"epoch", epoch + 1}, {"step", step + 1}});
        health_events.push_back(std::move(event));
      }
      for (int i = 0; i < batch; ++i) correct += (probabilities[i] > 0.5f) == (batch_labels[i] > 0.5f);
      if (!std::isfinite(loss)) {
        if (out) fmt::print(out, "\n");
        if (options.metrics) {  // the epoch's health events first: they show what led up to it
          health_events.push_back({{"event", "diverged"}, {"precision", precision}, {"epoch", epoch + 1},
                                   {"step", b + 1}, {"global_step", step + 1}});
          options.metrics->write_all(health_events);
        }
        fail("loss became {} at epoch {} step {} ({} precision); {}", std::isnan(loss) ? "NaN" : "infinite",
             epoch + 1, b + 1, precision, last_good(result.checkpoint));
      }
      loss_sum += static_cast<double>(loss) * batch;
      seen += batch;
      const std::vector<Metric> running{{"accuracy", static_cast<double>(correct) / seen}, {"loss", loss_sum / seen}};
      bar.update(b + 1, running);
    }
    EpochSummary summary{epoch + 1, loss_sum / seen, static_cast<double>(correct) / seen, std::nullopt,
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count()};
    context.synchronize();
    state.pull();
    const std::string invalid = invalid_state(state.entries());
    FP8KIT_CHECK(invalid.empty(), "{} during epoch {} ({} precision); {}", invalid, epoch + 1, precision,
                 last_good(result.checkpoint));
    if (validation) summary.validation = evaluate(model, *validation, options.batch_size);

    std::vector<Metric> final{{"accuracy", summary.accuracy}, {"loss", summary.loss}};
    nlohmann::json event = {{"event", "epoch"},         {"precision", precision},     {"epoch", epoch + 1},
                            {"step", adam.iterations()}, {"loss", summary.loss},       {"accuracy", summary.accuracy},
                            {"seconds", summary.seconds}};
    if (summary.validation) {
      final.push_back({"val_accuracy", summary.validation->accuracy});
      final.push_back({"val_loss", summary.validation->loss});
      event.update(evaluation_json(*summary.validation, "val_"));
    }
    bar.finish(final);
    // The log stays consistent with the checkpoint under a kill at any instant: the epoch's line is on
    // disk (written and synced) before its checkpoint is renamed into place, so a checkpoint of epoch N
    // never exists without the line of epoch N. A kill between the two leaves a line whose epoch the
    // checkpoint lacks; resume forgets such lines (forget_epochs_after) and trains those epochs again,
    // writing their lines anew. A line cut short by a kill is dropped when the log is reopened.
    if (options.metrics) {
      health_events.push_back(std::move(event));
      options.metrics->write_all(health_events);
      health_events.clear();
    }
    if (!checkpoint.empty()) {
      io::Metadata metadata;
      for (const auto& requirement : identity) metadata[requirement.key] = requirement.value;
      metadata["epoch"] = std::to_string(epoch + 1);
      metadata["step"] = std::to_string(adam.iterations());
      metadata["data_order"] = "data::epoch_order(train_examples, seed, epoch), batches of batch_size in order";
      metadata["fp8kit_version"] = kVersion;
      std::filesystem::create_directories(options.out);
      io::save_checkpoint(checkpoint, state.entries(), metadata);
      result.checkpoint = checkpoint;
    }
    result.epochs.push_back(summary);
  }

  if (test) {
    result.test = evaluate(model, *test, options.batch_size);
    if (out) {
      fmt::print(out, "Test: accuracy {:.4f} - loss {:.4f} ({} examples)\nAccuracy ({}): {:.2f}%\n",
                 result.test->accuracy, result.test->loss, test->size(), precision, 100.0 * result.test->accuracy);
    }
    if (options.metrics) {
      nlohmann::json event = {{"event", "test"}, {"precision", precision}, {"examples", test->size()}};
      event.update(evaluation_json(*result.test, ""));
      options.metrics->write(event);
    }
  }
  if (options.inspect_fp8) print_fp8_state(out, model, "after training");
  return result;
}

}  // namespace fp8kit::train
