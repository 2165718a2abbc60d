// The LM training loop: a step (micro-batches, accumulation, clipping, AdamW) queued on the model's
// context, captured once as a CUDA graph on the GPU; progress, validation, checkpoints and resume.
#include "train/lm_trainer.h"

#include "base/error.h"
#include "base/version.h"
#include "exec/captured_step.h"
#include "io/checkpoint.h"
#include "ops/elementwise.h"
#include "ops/grad_norm.h"
#include "ops/tensor_checks.h"
#include "train/health.h"
#include "train/progress.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace fp8kit::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double sum_of(const Tensor& t) {
  const Tensor host = t.to(Device::Cpu);
  double sum = 0;
  for (float v : host.span<float>()) sum += v;
  return sum;
}

void check_stream(std::span<const int32_t> stream, int64_t vocab, std::string_view what) {
  const auto [lo, hi] = std::minmax_element(stream.begin(), stream.end());
  FP8KIT_CHECK(stream.empty() || (*lo >= 0 && *hi < vocab),
               "the {} tokens have ids in [{}, {}] but the model's vocabulary has {}: use the tokenizer the model "
               "was configured for",
               what, *lo, *hi, vocab);
}

// One optimizer step's work: `accumulation` micro-batches of forward and backward (gradients summed),
// the global norm's clipping, AdamW. Its inputs live in tensors on the model's device that each
// step refills, so the same captured graph serves every step.
class LmStepper {
 public:
  LmStepper(models::Llama& model, optim::Adam& adam, const LmTrainOptions& o) : model_(model), adam_(adam), o_(o) {
    const Device d = model.device();
    const int64_t rows = o.batch * o.seq;
    tokens_ = Tensor({o.accumulation, o.batch, o.seq}, DType::I32, d);
    targets_ = Tensor({o.accumulation, rows}, DType::I32, d);
    losses_ = Tensor({o.accumulation, rows}, DType::F32, d);
    for (int64_t i = 0; i < o.accumulation; ++i) {
      token_views_.push_back(tokens_.view(i * rows, {o.batch, o.seq}));
      target_views_.push_back(targets_.view(i * rows, {rows}));
      loss_views_.push_back(losses_.view(i * rows, {rows}));
    }
    if (o.accumulation > 1) accumulated_ = Tensor(model.parameter_set().grads().shape(), DType::F32, d);
  }

  // Returns the step's mean loss and the gradients' global norm before clipping. record: the step
  // also records the FP8 health statistics into the scaling table's records.
  std::pair<double, double> run(std::span<const int32_t> tokens, std::span<const int32_t> targets, bool record) {
    tokens_.copy_from_host(tokens.data());
    targets_.copy_from_host(targets.data());
    (record ? recording_step_ : step_).run(model_.context());
    model_.context().synchronize();
    const double loss = sum_of(losses_) / static_cast<double>(losses_.numel());
    return {loss, norm_.numel() > 0 ? static_cast<double>(norm_.to(Device::Cpu).data<float>()[0]) : 0.0};
  }

 private:
  void queue(ops::Context& c, bool record) {
    ops::ScalingTable* scaling = model_.scaling();
    if (scaling != nullptr) scaling->set_recording(record);
    Tensor& grads = model_.parameter_set().grads();
    const float scale = 1.0f / static_cast<float>(losses_.numel());
    for (int64_t i = 0; i < o_.accumulation; ++i) {
      model_.forward(token_views_[i], true);
      model_.backward(target_views_[i], scale, loss_views_[i]);
      c.join_all();  // the FP8 scaling update lands before the next micro-batch reads the scales
      if (o_.accumulation == 1) continue;
      if (i == 0) {
        ops::copy(c, grads, accumulated_);
      } else {
        ops::add(c, accumulated_, grads, false, accumulated_);
      }
    }
    if (o_.accumulation > 1) ops::copy(c, accumulated_, grads);
    ops::clip_by_global_norm(c, grads, o_.clip, norm_);
    adam_.step(c);
    if (scaling != nullptr) scaling->set_recording(false);
  }

  models::Llama& model_;
  optim::Adam& adam_;
  const LmTrainOptions& o_;
  Tensor tokens_, targets_, losses_, accumulated_, norm_;
  std::vector<Tensor> token_views_, target_views_, loss_views_;
  exec::CapturedStep step_{[this](ops::Context& c) { queue(c, false); }};
  exec::CapturedStep recording_step_{[this](ops::Context& c) { queue(c, true); }};
};

std::vector<nn::StateTensor> checkpoint_tensors(models::Llama& model, optim::Adam& adam) {
  std::vector<nn::StateTensor> tensors;
  for (nn::Parameter* p : model.parameters()) tensors.push_back({p->name, p->shape, &p->value});
  for (nn::StateTensor& t : adam.state()) tensors.push_back({"optimizer/" + t.name, t.shape, t.tensor, t.domain});
  for (nn::StateTensor& t : model.fp8_state()) tensors.push_back(t);
  return tensors;
}

// The FP8 recipe as the run uses it ("none" without FP8 Linears), and any per-Linear rules. The rules
// decide which Linears keep scaling state under which names, and how each scales.
std::string recipe_identity(const LmTrainOptions& o) {
  const bool fp8 = o.precision == nn::Precision::Fp8 ||
                   std::any_of(o.linears.rules().begin(), o.linears.rules().end(), [&](const nn::LinearRecipeRule& r) {
                     return nn::choose(r.recipe, o.recipe).precision == nn::Precision::Fp8;
                   });
  std::string text = fp8 ? describe(o.recipe) : "none";
  if (!o.linears.empty()) {  // block scaling's description leaves out what per-tensor rules use
    Fp8Recipe per_tensor = o.recipe;
    per_tensor.mode = ScalingMode::Delayed;
    text += fmt::format("; per Linear {} ({})", o.linears.describe(), describe(per_tensor));
  }
  return text;
}

// What a checkpoint must agree on to continue this run.
std::vector<io::MetadataRequirement> run_identity(const LmTrainOptions& o) {
  const auto& a = o.adam;
  const nlohmann::json adam = {{"learning_rate", a.learning_rate}, {"beta1", a.beta1},
                               {"beta2", a.beta2},                 {"epsilon", a.epsilon},
                               {"weight_decay", a.weight_decay},   {"warmup_steps", a.warmup_steps},
                               {"decay_steps", a.decay_steps},     {"min_lr_ratio", a.min_lr_ratio}};
  return {{"model", "llama", "the model"},
          {"model_config", models::llama_config_json(o.model), "--config"},
          {"precision", std::string(nn::name(o.precision)), "--precision"},
          {"recipe", recipe_identity(o), "--recipe, its options and --linear-recipe"},
          {"seed", std::to_string(o.seed), "--seed"},
          {"batch", fmt::format("{} x {} x {}", o.accumulation, o.batch, o.seq), "--batch/--accumulation/--seq"},
          {"optimizer", "adamw " + adam.dump() + fmt::format(" clip {}", o.clip), "the optimizer options"}};
}

}  // namespace

LmEvaluation evaluate_lm(models::Llama& model, const data::TokenWindows& windows, int64_t batch, int64_t max_batches) {
  const int64_t batches = windows.evaluation_batches(batch, max_batches);
  const Device d = model.device();
  Tensor tokens({batch, windows.seq()}, DType::I32, d), targets({batch * windows.seq()}, DType::I32, d), losses;
  std::vector<int32_t> inputs, next;
  double sum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    inputs.clear();
    next.clear();
    windows.ordered_batch(b, batch, inputs, next);
    tokens.copy_from_host(inputs.data());
    targets.copy_from_host(next.data());
    model.evaluate(tokens, targets, losses);
    model.context().synchronize();
    sum += sum_of(losses);
  }
  LmEvaluation e;
  e.tokens = batches * batch * windows.seq();
  e.loss = sum / static_cast<double>(e.tokens);
  e.perplexity = std::exp(e.loss);
  return e;
}

LmTrainResult train_lm(const LmTrainOptions& o, std::span<const int32_t> train_stream,
                       std::span<const int32_t> validation_stream) {
  FP8KIT_CHECK(o.steps >= 0, "--steps must be at least 0, not {}", o.steps);
  FP8KIT_CHECK(o.batch > 0 && o.accumulation > 0, "--batch and --accumulation must be positive");
  FP8KIT_CHECK(o.seq >= 1 && o.seq <= o.model.max_position_embeddings,
               "--seq {} must be in [1, max_position_embeddings = {}]", o.seq, o.model.max_position_embeddings);
  check_stream(train_stream, o.model.vocab_size, "training");
  check_stream(validation_stream, o.model.vocab_size, "validation");
  const data::TokenWindows train_windows(train_stream, o.seq, o.seed);
  const data::TokenWindows validation_windows(validation_stream, o.seq, o.seed);

  LmTrainResult result{models::Llama(o.model, o.seed, o.device), 0, 0, std::nullopt, 0, 0};
  models::Llama& model = result.model;
  model.set_precision(o.precision, o.recipe, o.linears);
  model.set_memory_options(o.memory);
  optim::AdamOptions adam_options = o.adam;
  if (adam_options.decay_steps == 0 && o.steps > adam_options.warmup_steps) adam_options.decay_steps = o.steps;
  optim::Adam adam(model.parameter_set(), adam_options);

  // Resume.
  const std::filesystem::path checkpoint =
      o.out.empty() ? std::filesystem::path() : o.out / fmt::format("checkpoint-{}.safetensors", nn::name(o.precision));
  nn::HostState state(checkpoint_tensors(model, adam));
  const std::vector<io::MetadataRequirement> identity = run_identity(o);
  int64_t done = 0;
  if (o.resume && !checkpoint.empty() && std::filesystem::exists(checkpoint)) {
    io::load_checkpoint(checkpoint, state.entries(), identity);
    state.push();
    if (model.scaling() != nullptr) model.scaling()->restored(model.context());
    done = adam.iterations();
    if (o.console != nullptr) fmt::print(o.console, "Resumed from {} at step {}\n", checkpoint.string(), done);
  }
  auto save = [&](int64_t step) {
    if (checkpoint.empty()) return;
    model.context().synchronize();
    state.pull();
    io::Metadata metadata;
    for (const auto& requirement : identity) metadata[requirement.key] = requirement.value;
    metadata["step"] = std::to_string(step);
    metadata["data_order"] = "data::TokenWindows(stream, seq, seed), windows step * batch * accumulation on";
    metadata["fp8kit_version"] = kVersion;
    std::filesystem::create_directories(o.out);
    io::save_checkpoint(checkpoint, state.entries(), metadata);
  };

  LmStepper stepper(model, adam, o);
  const int64_t rows = o.batch * o.seq, windows_per_step = o.batch * o.accumulation;
  const double tokens_per_step = static_cast<double>(rows * o.accumulation);
  const double flops_per_step = models::flops_per_token(o.model, o.seq) * tokens_per_step;
  // Health statistics need per-tensor FP8 scales (block scaling keeps no slots) and a log.
  const bool health = o.health_every > 0 && o.metrics != nullptr && model.scaling() != nullptr &&
                      model.scaling()->size() > 0;
  std::vector<int32_t> inputs, targets;
  ProgressBar progress(o.steps, o.console);
  double seconds = 0, loss = NAN;
  int64_t timed_steps = 0, recordings = 0;
  auto validate = [&](int64_t step) {
    result.validation = evaluate_lm(model, validation_windows, o.batch, o.eval_batches);
    if (o.metrics != nullptr)
      o.metrics->write({{"event", "validation"},
                        {"precision", nn::name(o.precision)},
                        {"step", step},
                        {"loss", result.validation->loss},
                        {"perplexity", result.validation->perplexity}});
  };
  for (int64_t step = done; step < o.steps; ++step) {
    inputs.clear();
    targets.clear();
    for (int64_t w = 0; w < windows_per_step; ++w) train_windows.window(step * windows_per_step + w, inputs, targets);
    const auto start = Clock::now();
    const bool record = health && records_health(o.health_every, step + 1);
    const auto [step_loss, norm] = stepper.run(inputs, targets, record);
    recordings += record;
    // The first two steps build the graph (eager, then capture): not timed; nor the first two
    // recording steps, which build theirs.
    if (step >= done + 2 && (!record || recordings > 2)) {
      seconds += seconds_since(start);
      ++timed_steps;
    }
    loss = step_loss;
    FP8KIT_CHECK(std::isfinite(loss), "the loss became {} at step {}: try a lower --lr or another --recipe", loss,
                 step + 1);
    const double tps = timed_steps > 0 ? tokens_per_step * timed_steps / seconds : 0;
    result.tokens_per_second = tps;
    result.mfu = o.peak_flops > 0 && timed_steps > 0 ? flops_per_step * timed_steps / seconds / o.peak_flops : 0;
    const double lr = ops::scheduled_learning_rate(adam_options, static_cast<double>(step + 1));
    std::vector<Metric> metrics = {{"loss", loss}, {"lr", lr, 6}, {"grad_norm", norm}, {"tok/s", tps, 0}};
    if (o.peak_flops > 0) metrics.push_back({"mfu %", 100 * result.mfu, 1});
    progress.update(step + 1, metrics);
    if (o.metrics != nullptr)
      o.metrics->write({{"event", "step"},   {"precision", nn::name(o.precision)}, {"step", step + 1},
                        {"loss", loss},      {"lr", lr},
                        {"grad_norm", norm}, {"tokens_per_second", tps}});
    if (record) {
      nlohmann::json event = health_event(*model.scaling(), model.scaling()->read_records(model.context()));
      event.update(nlohmann::json{{"precision", nn::name(o.precision)}, {"step", step + 1}});
      o.metrics->write(event);
    }
    const bool last = step + 1 == o.steps;
    if (o.eval_every > 0 && (step + 1) % o.eval_every == 0 && !last) validate(step + 1);
    if (last || (o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0)) save(step + 1);
  }
  validate(o.steps);
  std::vector<Metric> final_metrics = {{"loss", loss},
                                       {"val_loss", result.validation->loss},
                                       {"val_ppl", result.validation->perplexity}};
  progress.finish(final_metrics);
  result.steps = o.steps;
  result.final_loss = loss;
  return result;
}

}  // namespace fp8kit::train
