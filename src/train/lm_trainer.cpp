// The LM training loop: a step (micro-batches, accumulation, clipping, AdamW) queued on the model's
// context, captured once as a CUDA graph on the GPU; progress, validation, checkpoints and resume; the
// data-parallel collectives of a job's ranks.
#include "train/lm_trainer.h"

#include "base/error.h"
#include "base/version.h"
#include "dist/communicator.h"
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
#include <cstring>

namespace fp8kit::train {

void check_batch_split(int64_t batch, int64_t processes) {
  FP8KIT_CHECK(batch % processes == 0,
               "--batch {} is not divisible by the {} processes of the job: give a multiple of {}", batch, processes,
               processes);
}

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

int world_size(const dist::Communicator* comm) { return comm == nullptr ? 1 : comm->world_size(); }
int rank(const dist::Communicator* comm) { return comm == nullptr ? 0 : comm->rank(); }

// The sum of every rank's `local` in rank order, on every rank (host values over the store).
double sum_over_ranks(dist::Communicator* comm, double local) {
  if (world_size(comm) == 1) return local;
  double sum = 0;
  for (const auto& blob : comm->store().allgather(std::as_bytes(std::span(&local, 1)))) {
    double v = 0;
    std::memcpy(&v, blob.data(), sizeof v);
    sum += v;
  }
  return sum;
}

// This rank's share of a micro-batch of `batch` sequences: [first, first + count).
std::pair<int64_t, int64_t> rank_slice(int64_t batch, const dist::Communicator* comm) {
  const int64_t w = world_size(comm);
  check_batch_split(batch, w);
  return {rank(comm) * (batch / w), batch / w};
}

using Range = std::pair<int64_t, int64_t>;  // [first, last) elements of the flat parameter buffers

// Each parameter's span of the flat buffers, in parameters()'s order: its elements and the alignment
// gap after it (zeros on every rank), so that neighbours' spans tile the buffers.
std::vector<Range> parameter_spans(nn::ParameterSet& set) {
  std::vector<int64_t> starts;
  for (size_t i = 0; i < set.parameters().size(); ++i) starts.push_back(set.offset(i));
  std::vector<int64_t> sorted = starts;
  std::sort(sorted.begin(), sorted.end());
  std::vector<Range> spans;
  for (const int64_t start : starts) {
    const auto next = std::upper_bound(sorted.begin(), sorted.end(), start);
    spans.emplace_back(start, next == sorted.end() ? set.grads().numel() : *next);
  }
  return spans;
}

// The buckets of a data-parallel step's gradient reduction: the flat buffers cut, in order, at the end
// of the first span that makes a bucket at least `elements` long, rounded up to a multiple of
// `multiple` (ZeRO-1's world size), so that every bucket splits into equal shards; but the last
// elements past the buffers' last such multiple (fewer than `multiple`) make a bucket of their own.
std::vector<Range> gradient_buckets(const std::vector<Range>& spans, int64_t total, int64_t elements,
                                    int64_t multiple) {
  std::vector<Range> sorted = spans, buckets;
  std::sort(sorted.begin(), sorted.end());
  const int64_t even = total / multiple * multiple;
  int64_t first = 0;
  for (const auto& [begin, end] : sorted) {
    if (end <= first || (end - first < elements && end < total)) continue;
    const int64_t last = std::min(even, (end + multiple - 1) / multiple * multiple);
    if (last <= first) continue;
    buckets.emplace_back(first, last);
    first = last;
  }
  if (first < total) buckets.emplace_back(first, total);
  return buckets;
}

// `collectives` queued on Lane::Comm behind everything queued so far, Main waiting for them.
template <typename F>
void on_comm_lane(ops::Context& c, F&& collectives) {
  c.follow_all(ops::Lane::Comm);
  {
    const ops::Context::OnLane lane(c, ops::Lane::Comm);
    collectives();
  }
  c.join(ops::Lane::Comm);
}

// A data-parallel step's gradient reduction: each bucket of the flat gradient buffer queued on
// Lane::Comm as soon as the backward has made every gradient in it final
// (BackwardHooks::gradients_final), so that on the GPU it overlaps the rest of the backward. A sum,
// all-reduced, or with ZeRO-1 reduce-scattered (every rank receives the sums of its slice of the
// bucket alone; a bucket of fewer elements than ranks is all-reduced): every rank's loss is already
// scaled by 1 / the whole job's tokens of the step.
class GradientReducer {
 public:
  GradientReducer(nn::ParameterSet& set, dist::Communicator& comm, std::vector<Range> buckets, bool scatter)
      : grads_(set.grads()), comm_(comm), buckets_(std::move(buckets)), scatter_(scatter) {
    const std::vector<Range> spans = parameter_spans(set);
    overlaps_.resize(spans.size());
    parameters_.assign(buckets_.size(), 0);
    for (size_t i = 0; i < spans.size(); ++i)
      for (size_t b = 0; b < buckets_.size(); ++b)
        if (spans[i].first < buckets_[b].second && buckets_[b].first < spans[i].second) {
          overlaps_[i].push_back(b);
          ++parameters_[b];
        }
  }

  // Before a step's last backward: `accumulated` (the earlier micro-batches' gradient sum, or null)
  // is added into each bucket before its reduction.
  void begin(const Tensor* accumulated) {
    accumulated_ = accumulated;
    pending_ = parameters_;
  }

  models::BackwardHooks hooks() {
    return {.gradients_final = [this](ops::Context& c, size_t begin, size_t end) { ready(c, begin, end); },
            .before_scaling_update = {}};
  }

 private:
  void ready(ops::Context& c, size_t begin, size_t end) {
    std::vector<size_t> due;  // the buckets whose last parameter this is
    for (size_t i = begin; i < end; ++i)
      for (const size_t b : overlaps_[i])
        if (--pending_[b] == 0) due.push_back(b);
    if (due.empty()) return;
    c.follow_all(ops::Lane::Comm);
    const ops::Context::OnLane lane(c, ops::Lane::Comm);
    for (const size_t b : due) {
      const auto [first, last] = buckets_[b];
      Tensor bucket = grads_.view(first, {last - first});
      if (accumulated_ != nullptr) ops::add(c, accumulated_->view(first, {last - first}), bucket, false, bucket);
      if (scatter_ && (last - first) % comm_.world_size() == 0) comm_.reduce_scatter(c, bucket, dist::ReduceOp::Sum);
      else comm_.all_reduce(c, bucket, dist::ReduceOp::Sum);
    }
  }

  Tensor& grads_;
  dist::Communicator& comm_;
  std::vector<Range> buckets_;
  bool scatter_;
  std::vector<std::vector<size_t>> overlaps_;  // per parameter: the buckets its span overlaps
  std::vector<int> parameters_, pending_;      // per bucket: the parameters it overlaps; those not final yet
  const Tensor* accumulated_ = nullptr;
};

// ZeRO-1's shard of the flat buffers on this rank: its 1 / world size slice of every gradient bucket
// (slice r of a bucket is what its reduce_scatter sums on rank r; rank 0 takes the whole of a bucket
// that does not split evenly), gathered in bucket order (the flat order: the decayed elements lead)
// into tensors of its own, the values and gradients that its AdamW updates.
class Zero1Shard {
 public:
  Zero1Shard(const std::vector<Range>& buckets, nn::ParameterSet& set, int rank, int world) : buckets_(buckets) {
    int64_t elements = 0;
    for (const auto& [first, last] : buckets_) {
      const bool even = (last - first) % world == 0;
      const int64_t slice = even ? (last - first) / world : rank == 0 ? last - first : 0;
      const int64_t begin = even ? first + rank * slice : first;
      slices_.emplace_back(begin, begin + slice);
      decayed_ += std::clamp<int64_t>(set.decayed_end() - begin, 0, slice);
      elements += slice;
    }
    values = Tensor({elements}, DType::F32, set.device());
    grads = Tensor({elements}, DType::F32, set.device());
  }

  int64_t decayed() const { return decayed_; }

  // This rank's slices of `flat` (laid out as the flat buffers) into `shard` (laid out as the shard).
  void to_shard(ops::Context& c, const Tensor& flat, Tensor& shard) const { copy_slices(c, flat, shard, true); }
  // And back: `shard` into this rank's slices of `flat`.
  void from_shard(ops::Context& c, const Tensor& shard, Tensor& flat) const { copy_slices(c, shard, flat, false); }
  // Every rank's slices of `flat` into every rank's.
  void all_gather(dist::Communicator& comm, ops::Context& c, Tensor& flat) const {
    for (const auto& [first, last] : buckets_) {
      Tensor bucket = flat.view(first, {last - first});
      if ((last - first) % comm.world_size() == 0) comm.all_gather(c, bucket);
      else comm.broadcast(c, bucket);  // rank 0's
    }
  }

  Tensor values, grads;

 private:
  // Each slice between its place in the flat buffers and its place in the shard, either way.
  void copy_slices(ops::Context& c, const Tensor& from, Tensor& to, bool to_shard) const {
    int64_t at = 0;
    for (const auto& [first, last] : slices_) {
      const int64_t n = last - first, from_at = to_shard ? first : at, to_at = to_shard ? at : first;
      Tensor into = to.view(to_at, {n});
      ops::copy(c, from.view(from_at, {n}), into);
      at += n;
    }
  }

  std::vector<Range> buckets_, slices_;
  int64_t decayed_ = 0;
};

// Every rank's FP8 amaxes become their maximum before the scale update (as Transformer Engine's amax
// reduction), queued on Lane::Comm behind the gradients' reductions.
void reduce_amaxes(dist::Communicator& comm, ops::Context& c, ops::ScalingTable& table) {
  on_comm_lane(c, [&] { comm.all_reduce(c, table.amaxes(), dist::ReduceOp::Max); });
}

// One optimizer step's work: `accumulation` micro-batches of forward and backward (gradients summed),
// the global norm's clipping, AdamW. Its inputs live in tensors on the model's device that each
// step refills, so the same captured graph serves every step.
class LmStepper {
 public:
  // buckets: the gradient reduction's (with o.comm); zero: ZeRO-1's shard, which `adam` updates, or null.
  LmStepper(models::Llama& model, optim::Adam& adam, const LmTrainOptions& o, std::vector<Range> buckets,
            Zero1Shard* zero)
      : model_(model), adam_(adam), o_(o), local_batch_(rank_slice(o.batch, o.comm).second), zero_(zero) {
    const Device d = model.device();
    const int64_t rows = local_batch_ * o.seq;
    tokens_ = Tensor({o.accumulation, local_batch_, o.seq}, DType::I32, d);
    targets_ = Tensor({o.accumulation, rows}, DType::I32, d);
    losses_ = Tensor({o.accumulation, rows}, DType::F32, d);
    for (int64_t i = 0; i < o.accumulation; ++i) {
      token_views_.push_back(tokens_.view(i * rows, {local_batch_, o.seq}));
      target_views_.push_back(targets_.view(i * rows, {rows}));
      loss_views_.push_back(losses_.view(i * rows, {rows}));
    }
    if (o.accumulation > 1) accumulated_ = Tensor(model.parameter_set().grads().shape(), DType::F32, d);
    if (o.comm != nullptr) reducer_.emplace(model.parameter_set(), *o.comm, std::move(buckets), zero != nullptr);
  }

  // This rank's windows of a step: its slice of every micro-batch.
  int64_t local_batch() const { return local_batch_; }

  // Returns the step's mean loss (over the whole job) and the gradients' global norm before clipping.
  // record: the step also records the FP8 health statistics into the scaling table's records.
  std::pair<double, double> run(std::span<const int32_t> tokens, std::span<const int32_t> targets, bool record) {
    tokens_.copy_from_host(tokens.data());
    targets_.copy_from_host(targets.data());
    (record ? recording_step_ : step_).run(model_.context());
    if (o_.comm != nullptr) o_.comm->wait(model_.context());  // a dead rank ends this instead of a hang
    model_.context().synchronize();
    const double loss = sum_over_ranks(o_.comm, sum_of(losses_)) /
                        static_cast<double>(losses_.numel() * world_size(o_.comm));
    return {loss, norm_.numel() > 0 ? static_cast<double>(norm_.to(Device::Cpu).data<float>()[0]) : 0.0};
  }

 private:
  void queue(ops::Context& c, bool record) {
    ops::ScalingTable* scaling = model_.scaling();
    if (scaling != nullptr) scaling->set_recording(record);
    Tensor& grads = model_.parameter_set().grads();
    // The mean over the whole job's tokens of the step: the ranks' gradients then sum to the mean's.
    const float scale = 1.0f / static_cast<float>(losses_.numel() * world_size(o_.comm));
    for (int64_t i = 0; i < o_.accumulation; ++i) {
      const bool last = i + 1 == o_.accumulation;
      models::BackwardHooks hooks;
      if (reducer_ && last) {
        reducer_->begin(o_.accumulation > 1 ? &accumulated_ : nullptr);
        hooks = reducer_->hooks();
      }
      if (o_.comm != nullptr)
        hooks.before_scaling_update = [comm = o_.comm](ops::Context& c, ops::ScalingTable& table) {
          reduce_amaxes(*comm, c, table);
        };
      model_.forward(token_views_[i], true);
      model_.backward(target_views_[i], scale, loss_views_[i], hooks);
      c.join_all();  // the FP8 scaling update lands before the next micro-batch reads the scales
      if (o_.accumulation == 1) continue;
      if (i == 0) {
        ops::copy(c, grads, accumulated_);
      } else if (!last) {
        ops::add(c, accumulated_, grads, false, accumulated_);
      } else if (!reducer_) {  // (the reducer adds each bucket before its all-reduce)
        ops::add(c, accumulated_, grads, false, grads);
      }
    }
    // ZeRO-1: this rank's shard of the gradients (the sums its reduce-scatters received), clipped by
    // the whole gradient's norm, updates its shard of the parameters; then every rank's to every rank.
    if (zero_ == nullptr) {
      ops::clip_by_global_norm(c, grads, o_.clip, norm_);
      adam_.step(c);
    } else {
      Tensor& values = model_.parameter_set().values();
      zero_->to_shard(c, grads, zero_->grads);
      zero_->to_shard(c, values, zero_->values);
      ops::clip_by_global_norm(c, zero_->grads, o_.clip, norm_, [&](Tensor& sum_of_squares) {
        on_comm_lane(c, [&] { o_.comm->all_reduce(c, sum_of_squares, dist::ReduceOp::Sum); });
      });
      adam_.step(c);
      zero_->from_shard(c, zero_->values, values);
      on_comm_lane(c, [&] { zero_->all_gather(*o_.comm, c, values); });
    }
    if (scaling != nullptr) scaling->set_recording(false);
  }

  models::Llama& model_;
  optim::Adam& adam_;
  const LmTrainOptions& o_;
  int64_t local_batch_;
  Zero1Shard* zero_;
  std::optional<GradientReducer> reducer_;
  Tensor tokens_, targets_, losses_, accumulated_, norm_;
  std::vector<Tensor> token_views_, target_views_, loss_views_;
  exec::CapturedStep step_{[this](ops::Context& c) { queue(c, false); }};
  exec::CapturedStep recording_step_{[this](ops::Context& c) { queue(c, true); }};
};

// ZeRO-1's optimizer moments in the checkpoint's layout (the parameters' flat buffers), on the model's
// device, only while a checkpoint is written or read: every rank's shard gathered, or a loaded
// checkpoint's spread back to the shards.
struct FullMoments {
  Tensor m, v;
  std::vector<Tensor> views;

  FullMoments(const Tensor& values) : m(values.shape(), DType::F32, values.device()), v(m.shape(), DType::F32, m.device()) {}

  // The shards of every rank into m and v (every rank calls it).
  void gather(optim::Adam& adam, const Zero1Shard& zero, dist::Communicator& comm, ops::Context& c) {
    for (auto [full, shard] : {std::pair{&m, &adam.m()}, std::pair{&v, &adam.v()}}) {
      zero.from_shard(c, *shard, *full);
      zero.all_gather(comm, c, *full);
    }
    comm.wait(c);
    c.synchronize();
  }
  // This rank's shard of m and v into the optimizer.
  void scatter(optim::Adam& adam, const Zero1Shard& zero, ops::Context& c) {
    for (auto [full, shard] : {std::pair{&m, &adam.m()}, std::pair{&v, &adam.v()}}) zero.to_shard(c, *full, *shard);
    c.synchronize();
  }
};

// The checkpoint's tensors: the weights, the optimizer's state (with ZeRO-1, `full`'s moments), the
// FP8 state.
std::vector<nn::StateTensor> checkpoint_tensors(models::Llama& model, optim::Adam& adam, FullMoments* full) {
  std::vector<nn::StateTensor> tensors;
  for (nn::Parameter* p : model.parameters()) tensors.push_back({p->name, p->shape, &p->value});
  const std::vector<nn::StateTensor> optimizer =
      full == nullptr ? adam.state()
                      : optim::adam_state(model.parameter_set(), full->m, full->v, adam.iterations_tensor(), full->views);
  for (const nn::StateTensor& t : optimizer) tensors.push_back({"optimizer/" + t.name, t.shape, t.tensor, t.domain});
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
  if (o.fp8_attention) text += "; fp8 attention";  // (absent before the option: older runs resume)
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
          {"recipe", recipe_identity(o), "--recipe, its options, --linear-recipe and --fp8-attention"},
          {"seed", std::to_string(o.seed), "--seed"},
          {"batch", fmt::format("{} x {} x {}", o.accumulation, o.batch, o.seq), "--batch/--accumulation/--seq"},
          {"optimizer", "adamw " + adam.dump() + fmt::format(" clip {}", o.clip), "the optimizer options"}};
}

}  // namespace

LmEvaluation evaluate_lm(models::Llama& model, const data::TokenWindows& windows, int64_t batch, int64_t max_batches,
                         dist::Communicator* comm) {
  const int64_t batches = windows.evaluation_batches(batch, max_batches);
  const auto [first, count] = rank_slice(batch, comm);
  const Device d = model.device();
  Tensor tokens({count, windows.seq()}, DType::I32, d), targets({count * windows.seq()}, DType::I32, d), losses;
  std::vector<int32_t> inputs, next;
  double sum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    inputs.clear();
    next.clear();
    for (int64_t w = first; w < first + count; ++w) windows.ordered_window(b * batch + w, inputs, next);
    tokens.copy_from_host(inputs.data());
    targets.copy_from_host(next.data());
    model.evaluate(tokens, targets, losses);
    model.context().synchronize();
    sum += sum_of(losses);
  }
  sum = sum_over_ranks(comm, sum);
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
  rank_slice(o.batch, o.comm);  // checks the divisibility before any work
  FP8KIT_CHECK(o.comm == nullptr || o.comm->device() == o.device,
               "the {} backend's collectives run on the {}, but the model is on the {}: use --dist-backend {}",
               dist::name(o.comm->backend()), name(o.comm->device()), name(o.device),
               dist::name(dist::default_backend(o.device)));
  // Rank 0 alone writes (console, metrics, checkpoints).
  const bool lead = rank(o.comm) == 0;
  std::FILE* const console = lead ? o.console : nullptr;
  MetricsLog* const metrics_log = lead ? o.metrics : nullptr;
  FP8KIT_CHECK(o.seq >= 1 && o.seq <= o.model.max_position_embeddings,
               "--seq {} must be in [1, max_position_embeddings = {}]", o.seq, o.model.max_position_embeddings);
  check_stream(train_stream, o.model.vocab_size, "training");
  check_stream(validation_stream, o.model.vocab_size, "validation");
  const data::TokenWindows train_windows(train_stream, o.seq, o.seed);
  const data::TokenWindows validation_windows(validation_stream, o.seq, o.seed);

  LmTrainResult result{models::Llama(o.model, o.seed, o.device), 0, 0, std::nullopt, 0, 0};
  models::Llama& model = result.model;
  model.set_precision(o.precision, o.recipe, o.linears);
  model.set_fp8_attention(o.fp8_attention);
  model.set_memory_options(o.memory);
  optim::AdamOptions adam_options = o.adam;
  if (adam_options.decay_steps == 0 && o.steps > adam_options.warmup_steps) adam_options.decay_steps = o.steps;
  // ZeRO-1: this rank's AdamW covers its shard of the flat parameter buffers, a slice of every
  // gradient bucket.
  nn::ParameterSet& parameters = model.parameter_set();
  const int64_t elements = parameters.values().numel(), w = world_size(o.comm);
  const bool sharded = o.zero1 && w > 1;
  std::vector<Range> buckets = gradient_buckets(parameter_spans(parameters), elements,
                                                std::max<int64_t>(1, o.bucket_bytes / 4), sharded ? w : 1);
  std::optional<Zero1Shard> zero;
  if (sharded) zero.emplace(buckets, parameters, rank(o.comm), w);
  optim::Adam adam = zero ? optim::Adam(zero->values, zero->grads, zero->decayed(), adam_options)
                          : optim::Adam(parameters, adam_options);
  std::optional<FullMoments> full;  // ZeRO-1's, while a checkpoint is read or written

  // Resume.
  const std::filesystem::path checkpoint =
      o.out.empty() ? std::filesystem::path() : o.out / fmt::format("checkpoint-{}.safetensors", nn::name(o.precision));
  const std::vector<io::MetadataRequirement> identity = run_identity(o);
  int64_t done = 0;
  if (o.resume && (!checkpoint.empty() || o.comm != nullptr)) {
    // Rank 0 reads the checkpoint and broadcasts it: it holds the job's whole state (and the data
    // position is the step), so any number of ranks resumes it, and only rank 0 needs the file.
    uint8_t resumed = 0;
    if (zero) full.emplace(parameters.values());
    nn::HostState state(checkpoint_tensors(model, adam, full ? &*full : nullptr));
    if (lead && !checkpoint.empty() && std::filesystem::exists(checkpoint)) {
      try {
        io::load_checkpoint(checkpoint, state.entries(), identity);
      } catch (const Error& e) {
        if (o.comm != nullptr) o.comm->store().abort(e.what());  // every rank ends with rank 0's reason
        throw;
      }
      state.push();
      resumed = 1;
    }
    if (o.comm != nullptr) {
      resumed = static_cast<uint8_t>(o.comm->store().broadcast(std::as_bytes(std::span(&resumed, 1))).at(0));
      if (resumed != 0)
        for (const nn::StateTensor& t : checkpoint_tensors(model, adam, full ? &*full : nullptr))
          o.comm->broadcast(model.context(), *t.tensor);
      o.comm->wait(model.context());
      model.context().synchronize();
    }
    if (full && resumed != 0) full->scatter(adam, *zero, model.context());
    full.reset();
    if (resumed != 0) {
      if (model.scaling() != nullptr) model.scaling()->restored(model.context());
      done = adam.iterations();
      FP8KIT_CHECK(done <= o.steps, "{} is at step {}, past --steps {}: pass --steps {} or more to train on",
                   checkpoint.string(), done, o.steps, done + 1);
      if (console != nullptr) fmt::print(console, "Resumed from {} at step {}\n", checkpoint.string(), done);
    }
  }
  auto save = [&](int64_t step) {
    if (checkpoint.empty()) return;
    model.context().synchronize();
    if (zero) full.emplace(parameters.values()).gather(adam, *zero, *o.comm, model.context());
    if (lead) {
      nn::HostState state(checkpoint_tensors(model, adam, full ? &*full : nullptr));
      state.pull();
      io::Metadata metadata;
      for (const auto& requirement : identity) metadata[requirement.key] = requirement.value;
      metadata["step"] = std::to_string(step);
      metadata["processes"] = std::to_string(w);  // of the run that wrote it; any number resumes it
      metadata["data_order"] = "data::TokenWindows(stream, seq, seed), windows step * batch * accumulation on";
      metadata["fp8kit_version"] = kVersion;
      std::filesystem::create_directories(o.out);
      io::save_checkpoint(checkpoint, state.entries(), metadata);
    }
    full.reset();
  };

  LmStepper stepper(model, adam, o, std::move(buckets), zero ? &*zero : nullptr);
  const int64_t rows = o.batch * o.seq, windows_per_step = o.batch * o.accumulation;
  const int64_t first_window = rank_slice(o.batch, o.comm).first, local_batch = stepper.local_batch();
  const double tokens_per_step = static_cast<double>(rows * o.accumulation);
  const double flops_per_step = models::flops_per_token(o.model, o.seq) * tokens_per_step;
  // Health statistics need per-tensor FP8 scales (block scaling keeps no slots) and a log.
  const bool health = o.health_every > 0 && metrics_log != nullptr && model.scaling() != nullptr &&
                      model.scaling()->size() > 0;
  std::vector<int32_t> inputs, targets;
  ProgressBar progress(o.steps, console);
  double seconds = 0, loss = NAN;
  int64_t timed_steps = 0, recordings = 0;
  auto validate = [&](int64_t step) {
    result.validation = evaluate_lm(model, validation_windows, o.batch, o.eval_batches, o.comm);
    if (metrics_log != nullptr)
      metrics_log->write({{"event", "validation"},
                        {"precision", nn::name(o.precision)},
                        {"step", step},
                        {"loss", result.validation->loss},
                        {"perplexity", result.validation->perplexity}});
  };
  for (int64_t step = done; step < o.steps; ++step) {
    inputs.clear();
    targets.clear();
    for (int64_t i = 0; i < o.accumulation; ++i)
      for (int64_t w = first_window; w < first_window + local_batch; ++w)
        train_windows.window(step * windows_per_step + i * o.batch + w, inputs, targets);
    const auto start = Clock::now();
    const bool record = health && records_health(o.health_every, step + 1, o.steps);
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
    std::vector<Metric> metrics = {{"loss", loss}, {"lr", lr, 6}, {"grad_norm", norm}};
    if (timed_steps > 0) metrics.push_back({"tok/s", tps, 0});  // (none before the third step)
    if (o.peak_flops > 0 && timed_steps > 0) metrics.push_back({"mfu %", 100 * result.mfu, 1});
    progress.update(step + 1, metrics);
    if (metrics_log != nullptr)
      metrics_log->write({{"event", "step"},   {"precision", nn::name(o.precision)}, {"step", step + 1},
                        {"loss", loss},      {"lr", lr},
                        {"grad_norm", norm}, {"tokens_per_second", tps}});
    if (record) {
      nlohmann::json event = health_event(*model.scaling(), model.scaling()->read_records(model.context()));
      event.update(nlohmann::json{{"precision", nn::name(o.precision)}, {"step", step + 1}});
      metrics_log->write(event);
    }
    const bool last = step + 1 == o.steps;
    if (o.eval_every > 0 && (step + 1) % o.eval_every == 0 && !last) validate(step + 1);
    if (last || (o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0)) save(step + 1);
  }
  validate(o.steps);
  std::vector<Metric> final_metrics = {{"val_loss", result.validation->loss}, {"val_ppl", result.validation->perplexity}};
  if (done < o.steps) final_metrics.insert(final_metrics.begin(), Metric{"loss", loss});  // no training loss without a step
  progress.finish(final_metrics);
  result.steps = o.steps;
  result.final_loss = loss;
  return result;
}

}  // namespace fp8kit::train
