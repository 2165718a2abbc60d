// The scaling table's arrays and their update: on the CPU slot by slot through numerics'
// ScalingState (the definition), on the GPU in one launch (ops/cuda/scaling_update.h, tested
// bit for bit against it).
#include "ops/scaling_table.h"

#include "base/error.h"
#include "numerics/scale.h"

#include <algorithm>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/current_scaling.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/scaling_update.h"
#endif

namespace fp8kit::ops {

namespace {

constexpr int64_t kGemmStride = 4;  // floats between gemm scale_invs: 16-byte aligned for cuBLASLt

Tensor filled(int64_t n, float value) {
  Tensor t({n}, DType::F32);
  std::fill_n(t.data<float>(), n, value);
  return t;
}

}  // namespace

ScalingTable::ScalingTable(const Fp8Recipe& recipe) : recipe_(recipe) {
  FP8KIT_CHECK(recipe.amax_history_length > 0, "the amax history length must be at least 1");
}

int ScalingTable::add(std::string name, Fp8Format format, std::optional<ScalingMode> mode) {
  FP8KIT_CHECK(scale_.numel() == 0, "FP8 tensor {} added to the scaling table after its allocation", name);
  const ScalingMode m = mode.value_or(recipe_.mode);
  FP8KIT_CHECK(m != ScalingMode::Block, "FP8 tensor {}: block scaling keeps no slot in the scaling table", name);
  names_.push_back(std::move(name));
  formats_.push_back(format);
  current_.push_back(m == ScalingMode::Current ? 1 : 0);
  return size() - 1;
}

int ScalingTable::add_linear(const std::string& path, std::optional<ScalingMode> mode) {
  const int slot = add(path + "/inputs", recipe_.forward_format, mode);
  add(path + "/kernel", recipe_.forward_format, mode);
  add(path + "/outputs_grad", recipe_.backward_format, mode);
  return slot;
}

bool ScalingTable::any_current() const {
  return std::any_of(current_.begin(), current_.end(), [](int32_t c) { return c != 0; });
}

Fp8Recipe ScalingTable::slot_recipe(int slot) const {
  Fp8Recipe r = recipe_;
  r.mode = current(slot) ? ScalingMode::Current : ScalingMode::Delayed;
  return r;
}

void ScalingTable::allocate(Device device) {
  const int64_t n = size(), L = static_cast<int64_t>(recipe_.amax_history_length);
  history_ = Tensor({n, L}, DType::F32);
  amax_ = Tensor({n}, DType::F32);
  eval_amax_ = Tensor({n}, DType::F32);
  scale_ = filled(n, 1.0f);
  scale_inv_ = filled(n, 1.0f);
  eval_scale_ = filled(n, 1.0f);
  fp8_max_ = Tensor({n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) fp8_max_.data<float>()[i] = fp8kit::fp8_max(formats_[i]);
  gemm_scale_inv_ = Tensor({kGemmStride * n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) gemm_scale_inv_.data<float>()[kGemmStride * i] = 1.0f;
  current_flags_ = Tensor({n}, DType::I32);
  std::copy(current_.begin(), current_.end(), current_flags_.data<int32_t>());
  to(device);
}

void ScalingTable::to(Device device) {
  for (Tensor* t : {&history_, &amax_, &scale_, &scale_inv_, &fp8_max_, &gemm_scale_inv_, &eval_amax_, &eval_scale_,
                    &current_flags_})
    if (t->device() != device) *t = t->to(device);
  for (Tensor* t : {&records_, &partials_})  // once set_recording made them
    if (t->numel() > 0 && t->device() != device) *t = t->to(device);
  views_.clear();
}

float* ScalingTable::cast_scale(int slot, bool training) {
  if (current(slot) && !training) return eval_scale_.device_data<float>() + slot;
  return (keras_lag(slot) ? scale_inv_ : scale_).device_data<float>() + slot;
}

float* ScalingTable::amax_slot(int slot, bool training) {
  if (training) return replaying_ ? nullptr : amax_.device_data<float>() + slot;
  return current(slot) ? eval_amax_.device_data<float>() + slot : nullptr;
}

void ScalingTable::copy_amax(ops::Context& c, int from, int to) {
  if (replaying_) return;
  float* amax = amax_.device_data<float>();
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    FP8KIT_CUDA_CHECK(
        cudaMemcpyAsync(amax + to, amax + from, sizeof(float), cudaMemcpyDeviceToDevice, ops::stream(c)));
#endif
    return;
  }
  amax[to] = amax[from];
}

float* ScalingTable::gemm_scale_inv(int slot) { return gemm_scale_inv_.device_data<float>() + kGemmStride * slot; }

void ScalingTable::current_scales(ops::Context& c, std::span<const int> slots, bool training) {
  float* amax = (training ? amax_ : eval_amax_).device_data<float>();
  float* scale = (training ? scale_ : eval_scale_).device_data<float>();
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::current_scales(slots, amax, fp8_max_.device_data<float>(), recipe_.scale_options, scale,
                         gemm_scale_inv_.device_data<float>(), kGemmStride, ops::stream(c));
#endif
    return;
  }
  for (const int i : slots) {
    scale[i] = current_scale(amax[i], formats_[i], recipe_.scale_options);
    gemm_scale_inv_.data<float>()[kGemmStride * i] = 1.0f / scale[i];
  }
}

void ScalingTable::update(ops::Context& c) {
  const int64_t n = size(), L = static_cast<int64_t>(recipe_.amax_history_length);
  if (n == 0) return;
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    const cuda::ScalingBatch batch{n,
                                   L,
                                   history_.device_data<float>(),
                                   amax_.device_data<float>(),
                                   scale_.device_data<float>(),
                                   scale_inv_.device_data<float>(),
                                   fp8_max_.device_data<float>(),
                                   current_flags_.device_data<int32_t>()};
    cuda::update_scaling(batch, recipe_, ops::stream(c));
    // Every slot's scale_inv into the GEMMs' copies (a current slot's is 1 / its step's scale, the
    // value its cast wrote there) and the amaxes cleared.
    cuda::spread(scale_inv_.device_data<float>(), n, kGemmStride, gemm_scale_inv_.device_data<float>(),
                 ops::stream(c), amax_.device_data<float>());
#endif
    return;
  }
  // numerics' ScalingState, slot by slot: record this step's amax, then (te lag) the next step's scale.
  for (int64_t i = 0; i < n; ++i) {
    ScalingState state(static_cast<size_t>(L));
    float* history = history_.data<float>() + i * L;
    std::copy_n(history, L, state.amax_history.values().begin());
    state.scale = scale_.data<float>()[i];
    state.keras_multiplier = scale_inv_.data<float>()[i];
    const Fp8Recipe recipe = slot_recipe(static_cast<int>(i));
    state.record_amax(amax_.data<float>()[i], recipe, formats_[i]);
    if (!current(static_cast<int>(i))) state.scale_for_step(recipe, formats_[i]);
    std::copy_n(state.amax_history.values().begin(), L, history);
    scale_.data<float>()[i] = state.scale;
    scale_inv_.data<float>()[i] = state.scale_inv(recipe);  // current: 1 / the step's scale
    gemm_scale_inv_.data<float>()[kGemmStride * i] = scale_inv_.data<float>()[i];
    amax_.data<float>()[i] = 0.0f;
  }
}

void ScalingTable::clear_evaluation_amaxes(ops::Context& c) {
  if (!any_current()) return;
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    FP8KIT_CUDA_CHECK(cudaMemsetAsync(eval_amax_.device_data<float>(), 0, size() * sizeof(float), ops::stream(c)));
#endif
    return;
  }
  std::fill_n(eval_amax_.data<float>(), size(), 0.0f);
}

void ScalingTable::set_recording(bool on) {
  FP8KIT_CHECK(scale_.numel() > 0 || size() == 0, "the scaling table records statistics once it is allocated");
  if (on && records_.numel() == 0 && size() > 0) {  // zeroed: a slot never cast reads as empty
    records_ = Tensor({size(), kQuantStatsWords}, DType::I32, scale_.device());
    partials_ = Tensor({size(), kQuantStatsParts * kQuantStatsWords}, DType::I32, scale_.device());
  }
  recording_ = on;
}

QuantStatsSpec ScalingTable::stats_spec(int slot) {
  const int64_t L = static_cast<int64_t>(recipe_.amax_history_length);
  return {formats_.at(slot), cast_scale(slot, true), divide(slot), history_.device_data<float>() + slot * L, L};
}

int32_t* ScalingTable::record_data(int slot) {
  FP8KIT_CHECK(records_.numel() > 0, "the scaling table's statistics records are made by set_recording(true)");
  return records_.device_data<int32_t>() + slot * kQuantStatsWords;
}

int32_t* ScalingTable::partials_data(int slot) {
  FP8KIT_CHECK(partials_.numel() > 0, "the scaling table's statistics records are made by set_recording(true)");
  return partials_.device_data<int32_t>() + slot * kQuantStatsParts * kQuantStatsWords;
}

void ScalingTable::record(Context& c, int slot, const Tensor& x) {
  FP8KIT_CHECK(records_.numel() > 0, "the scaling table's statistics records are made by set_recording(true)");
  Tensor record = records_.view(slot * kQuantStatsWords, {kQuantStatsWords});
  Tensor partials = partials_.view(slot * kQuantStatsParts * kQuantStatsWords, {kQuantStatsParts * kQuantStatsWords});
  quant_stats(c, x, stats_spec(slot), record, partials);
}

std::vector<QuantStats> ScalingTable::read_records(Context& c) {
  std::vector<QuantStats> stats;
  if (records_.numel() == 0) return stats;
  c.synchronize();
  const Tensor host = records_.to(Device::Cpu);
  for (int i = 0; i < size(); ++i)
    stats.push_back(decode_quant_stats(host.span<int32_t>().subspan(i * kQuantStatsWords, kQuantStatsWords)));
  return stats;
}

std::vector<ScalingStateView> ScalingTable::state() {
  const int64_t L = static_cast<int64_t>(recipe_.amax_history_length);
  if (views_.empty()) {  // made once, so that every state() hands out the same views
    for (int i = 0; i < size(); ++i) {
      views_.push_back((keras_lag(i) ? scale_inv_ : scale_).view(i, {1}));
      views_.push_back(history_.view(i * L, {L}));
    }
  }
  std::vector<ScalingStateView> entries;
  for (int i = 0; i < size(); ++i) {
    entries.push_back({names_[i] + "_scale", {}, &views_[2 * i], false});
    entries.push_back({names_[i] + "_amax_history", {L}, &views_[2 * i + 1], true});
  }
  return entries;
}

void ScalingTable::restored(ops::Context& c) {
  // The checkpoint holds the scale (te lag, current) or the multiplier (keras lag); the other
  // follows as 1 / it, and the GEMMs' copies.
  Tensor scale = scale_.to(Device::Cpu), scale_inv = scale_inv_.to(Device::Cpu), gemm = gemm_scale_inv_.to(Device::Cpu);
  for (int64_t i = 0; i < size(); ++i) {
    const int slot = static_cast<int>(i);
    float& kept = (keras_lag(slot) ? scale_inv : scale).data<float>()[i];
    (keras_lag(slot) ? scale : scale_inv).data<float>()[i] = 1.0f / kept;
    gemm.data<float>()[kGemmStride * i] = scale_inv.data<float>()[i];
  }
  c.synchronize();
  scale_.copy_from(scale);
  scale_inv_.copy_from(scale_inv);
  gemm_scale_inv_.copy_from(gemm);
}

}  // namespace fp8kit::ops
