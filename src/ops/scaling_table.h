// All FP8 scaling state of a model in one table: per scaled tensor (a Linear's inputs, kernel and
// output gradient) a slot named by module path ("dense/inputs"), with its scale, scale_inv, amax
// history and this step's amax, in arrays on the model's device, so that one launch updates them all
// after a step. The same arithmetic as numerics' ScalingState on either device (bit for bit).
// Each slot scales delayed or current (Linears of one model may differ: nn/linear_recipe.h); the
// recipe's other fields (lag, amax history and algorithm, margin, skip zero amax) are the table's.
#pragma once

#include "numerics/recipe.h"
#include "ops/context.h"
#include "ops/quant_stats.h"
#include "tensor/tensor.h"

#include <optional>
#include <string>
#include <vector>

namespace fp8kit::ops {

// A named tensor of the table's state (a view of its arrays, on its device).
struct ScalingStateView {
  std::string name;             // "<slot name>_scale" or "<slot name>_amax_history"
  std::vector<int64_t> shape;   // {} (one value) or {L}
  Tensor* tensor;
  bool history;                 // amaxes (non-negative) rather than a scale (positive)
};

class ScalingTable {
 public:
  explicit ScalingTable(const Fp8Recipe& recipe = {});

  // A tensor's slot, before allocate(): name "<module path>/<tensor>", the format it is cast to, and
  // its scaling: Delayed or Current (default: the recipe's mode; Block keeps no slots).
  int add(std::string name, Fp8Format format, std::optional<ScalingMode> mode = std::nullopt);
  // An FP8 Linear's three slots, as LinearOp reads them from its `slot`: "<path>/inputs" and
  // "<path>/kernel" in the recipe's forward format, then "<path>/outputs_grad" in its backward format.
  // Returns the first (LinearOp::slot).
  int add_linear(const std::string& path, std::optional<ScalingMode> mode = std::nullopt);
  // The arrays on `device`: scales 1, histories and amaxes 0.
  void allocate(Device device);
  // Moves the arrays to `device` (values kept).
  void to(Device device);

  const Fp8Recipe& recipe() const { return recipe_; }
  int size() const { return static_cast<int>(names_.size()); }
  const std::string& name(int slot) const { return names_.at(slot); }
  Fp8Format format(int slot) const { return formats_.at(slot); }
  bool current(int slot) const { return current_.at(slot) != 0; }
  bool any_current() const;
  bool keras_lag(int slot) const { return !current(slot) && recipe_.lag == ScalingLag::Keras; }
  // The recipe slot `slot` follows: the table's, with the slot's mode.
  Fp8Recipe slot_recipe(int slot) const;

  // The cast's scale of `slot` (one float on the table's device): q = fp8(x * scale), or in keras
  // lag q = fp8(x / multiplier) (divide(slot) is then true), for training (the state) or for
  // evaluation (current scaling writes its own copy there, so evaluation leaves the state as it is).
  float* cast_scale(int slot, bool training);
  bool divide(int slot) const { return keras_lag(slot); }
  // Where a cast records the tensor's amax (training: this step's, consumed by update(), unless
  // replaying; evaluation with current scaling: the evaluation copy; otherwise null).
  float* amax_slot(int slot, bool training);
  // Slot `to`'s amax of this training step is slot `from`'s (a cast of one input shared by two delayed
  // slots of one format, ops/linear.h's input_of), as to's own cast would have recorded it, so that
  // their histories and scales stay equal: after from's cast; nothing while replaying.
  void copy_amax(Context& c, int from, int to);
  // 1 / scale of the data cast with cast_scale(slot) (keras lag: the multiplier), in a 16-byte aligned
  // slot as cuBLASLt wants it; current scaling writes it with the scale.
  float* gemm_scale_inv(int slot);
  // Current scaling: the scales of `slots` from their amaxes (recorded by a cast without outputs just
  // before), on the device, as numerics' current_scale; writes cast_scale and gemm_scale_inv.
  void current_scales(ops::Context& c, std::span<const int> slots, bool training);

  // After a training step, every slot at once (one launch on the GPU), as ScalingState::record_amax
  // followed by the next step's scale_for_step: the histories take this step's amaxes, the scales
  // (te lag), the multipliers (keras lag) move, and the amaxes are cleared. Queue it after every lane
  // whose work reads this step's scales (weight-gradient GEMMs on Lane::Side or a dgrad's lane) is
  // joined: the GEMMs would otherwise read the next step's scales.
  void update(Context& c);
  // This step's amaxes that update() reads, [size()] f32 on the table's device: a data-parallel job
  // max-reduces them across its ranks before every update, so that every rank keeps the same scales.
  Tensor& amaxes() { return amax_; }
  // Evaluation with current scaling: clears the evaluation amaxes before a forward.
  void clear_evaluation_amaxes(ops::Context& c);

  // Health statistics (ops/quant_stats.h). While recording, every FP8 cast of a training step also
  // queues its tensor's statistics into the slot's record, right after the cast on the cast's lane,
  // with the scale that cast used (the last cast of a slot in a step wins: with gradient accumulation,
  // the last micro-batch's). A host switch read when ops are queued: a step captured with it on is
  // another CUDA graph than one captured with it off. The records are allocated at the first switch on.
  void set_recording(bool on);
  bool recording() const { return recording_ && !replaying_; }

  // Activation recomputation: a training forward queued again in the backward (from a block's saved
  // input) must cast as the step's first forward did and leave the state as it is. While replaying,
  // training casts use the scales as they stand (current scaling's included: the first forward's,
  // which nothing overwrites before update()) and record nothing: no amaxes, no current scales, no
  // health statistics. A host switch read when ops are queued, as set_recording.
  void set_replaying(bool on) { replaying_ = on; }
  bool replaying() const { return replaying_; }
  // How slot `slot`'s training cast quantizes (its scale, divide(slot), format and amax history).
  QuantStatsSpec stats_spec(int slot);
  // Queues the statistics of x, as slot `slot`'s training cast quantizes it, into the slot's record.
  void record(Context& c, int slot, const Tensor& x);
  // The slot's record and partials (device pointers, for kernels that derive x on the fly).
  int32_t* record_data(int slot);
  int32_t* partials_data(int slot);
  // Every slot's record, read back in one copy (waits for the context's work).
  std::vector<QuantStats> read_records(Context& c);

  // Checkpoint views, per slot "<name>_scale" (te lag, current: the scale; keras lag: Keras's
  // multiplier, the value the next step uses) and "<name>_amax_history" [L], valid until the table
  // moves (to()). After writing into them, call restored() to recompute what follows from them.
  std::vector<ScalingStateView> state();
  void restored(ops::Context& c);

 private:
  Fp8Recipe recipe_;
  std::vector<std::string> names_;
  std::vector<Fp8Format> formats_;
  std::vector<int32_t> current_;  // per slot, 1: current scaling
  std::vector<Tensor> views_;  // state()'s
  // [n] f32 unless said otherwise
  Tensor history_;              // [n, L], slot 0 newest
  Tensor amax_, scale_, scale_inv_, fp8_max_;
  Tensor current_flags_;        // [n] i32: current_ on the device, for the update
  Tensor gemm_scale_inv_;       // [4 n]: scale_inv of slot i at 4 i
  Tensor eval_amax_, eval_scale_;
  bool recording_ = false;
  bool replaying_ = false;
  Tensor records_;   // [n, kQuantStatsWords] i32, once recording was switched on
  Tensor partials_;  // [n, kQuantStatsParts * kQuantStatsWords] i32
};

}  // namespace fp8kit::ops
