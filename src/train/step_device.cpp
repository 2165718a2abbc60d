// The CPU step device: SeedClassifier::forward/backward and Adam::step on the host objects.
#include "train/step_device.h"

#include <algorithm>
#include <cmath>

namespace fp8kit::train {

namespace {

class CpuStepDevice final : public StepDevice {
 public:
  CpuStepDevice(models::SeedClassifier& model, optim::Adam& adam) : model_(model), adam_(adam) {}

  StepResult train_step(std::span<const int32_t> tokens, std::span<const float> labels, int batch,
                        int64_t step) override {
    const std::span<const float> probabilities = model_.forward(tokens, batch, /*training=*/true, step);
    // The loss clips the probabilities with fmax/fmin, which turn NaN into a finite value: check them too.
    if (std::any_of(probabilities.begin(), probabilities.end(), [](float p) { return std::isnan(p); }))
      return {NAN, probabilities};
    const float loss = model_.backward(labels);
    if (std::isfinite(loss)) adam_.step();
    return {loss, probabilities};
  }

  std::span<const float> predict(std::span<const int32_t> tokens, int batch) override {
    return model_.forward(tokens, batch, /*training=*/false, /*step=*/0);
  }

  void pull() override {}
  void push() override {}

 private:
  models::SeedClassifier& model_;
  optim::Adam& adam_;
};

}  // namespace

std::unique_ptr<StepDevice> cpu_step_device(models::SeedClassifier& model, optim::Adam& adam) {
  return std::make_unique<CpuStepDevice>(model, adam);
}

}  // namespace fp8kit::train
