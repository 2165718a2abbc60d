// The GPU step device: one SeedClassifierCuda per batch size seen; the live state sits in one of them
// and moves to another through the host objects when the batch size changes (once per epoch at most).
#include "train/step_device_cuda.h"

#include "base/error.h"
#include "models/seed_classifier_cuda.h"
#include "runtime/device.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace fp8kit::train {

namespace {

class CudaStepDevice final : public StepDevice {
 public:
  CudaStepDevice(models::SeedClassifier& model, optim::Adam& adam, uint64_t seed, int batch_size)
      : model_(model), adam_(adam), seed_(seed) {
    require_cuda();
    current_ = &instance(batch_size);
    current_->load_state(model_, adam_);
  }

  StepResult train_step(std::span<const int32_t> tokens, std::span<const float> labels, int batch,
                        int64_t step) override {
    if (batch != current_->batch()) {
      current_->store_state(model_, adam_);
      current_ = &instance(batch);
      current_->load_state(model_, adam_);
    }
    if (current_->step() != static_cast<uint64_t>(step)) current_->set_step(static_cast<uint64_t>(step));
    float loss = current_->train_step(tokens, labels);
    probabilities_ = current_->probabilities();
    // The loss clips the probabilities, which turns NaN into a finite value: check them too.
    if (std::any_of(probabilities_.begin(), probabilities_.end(), [](float p) { return std::isnan(p); })) loss = NAN;
    return {loss, probabilities_};
  }

  // In chunks of the live instance's batch size, the last one padded with token 0 (rows are
  // independent without dropout and with frozen scales).
  std::span<const float> predict(std::span<const int32_t> tokens, int batch) override {
    const int64_t chunk = current_->batch(), length = static_cast<int64_t>(tokens.size()) / batch;
    probabilities_.clear();
    std::vector<int32_t> padded;
    for (int64_t begin = 0; begin < batch; begin += chunk) {
      const int64_t n = std::min<int64_t>(chunk, batch - begin);
      padded.assign(static_cast<size_t>(chunk * length), 0);
      std::copy_n(tokens.begin() + begin * length, n * length, padded.begin());
      const std::vector<float> p = current_->predict(padded);
      probabilities_.insert(probabilities_.end(), p.begin(), p.begin() + n);
    }
    return probabilities_;
  }

  void pull() override { current_->store_state(model_, adam_); }
  void push() override { current_->load_state(model_, adam_); }

 private:
  models::SeedClassifierCuda& instance(int batch) {
    auto& slot = instances_[batch];
    if (!slot) slot = std::make_unique<models::SeedClassifierCuda>(model_, seed_, batch, adam_.options());
    return *slot;
  }

  models::SeedClassifier& model_;
  optim::Adam& adam_;
  uint64_t seed_;
  std::map<int, std::unique_ptr<models::SeedClassifierCuda>> instances_;
  models::SeedClassifierCuda* current_ = nullptr;
  std::vector<float> probabilities_;
};

}  // namespace

std::unique_ptr<StepDevice> cuda_step_device(models::SeedClassifier& model, optim::Adam& adam, uint64_t seed,
                                             int batch_size) {
  return std::make_unique<CudaStepDevice>(model, adam, seed, batch_size);
}

}  // namespace fp8kit::train
