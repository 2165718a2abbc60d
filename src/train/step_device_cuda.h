// The GPU step device (CUDA backend only): training steps as CUDA graph replays of SeedClassifierCuda,
// evaluation on the GPU, state synchronised with the host model and Adam for checkpoints and resume.
#pragma once

#include "train/step_device.h"

namespace fp8kit::train {

// A GPU copy of `model` (its precision and recipe; dropout keyed by `seed`) and of `adam`'s state,
// with one CUDA graph for batches of `batch_size` and another built when a batch of another size
// (an epoch's last, smaller batch) comes. Fails with a clear message when no GPU is present.
std::unique_ptr<StepDevice> cuda_step_device(models::SeedClassifier& model, optim::Adam& adam, uint64_t seed,
                                             int batch_size);

}  // namespace fp8kit::train
