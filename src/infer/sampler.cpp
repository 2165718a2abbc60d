// Greedy and filtered sampling over one row of logits, in double precision on the host.
#include "infer/sampler.h"

#include "base/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace fp8kit::infer {

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {
  FP8KIT_CHECK(options.temperature >= 0.0f, "--temperature must be >= 0, got {}", options.temperature);
  FP8KIT_CHECK(options.top_k >= 0, "--top-k must be >= 0, got {}", options.top_k);
  FP8KIT_CHECK(options.top_p > 0.0f && options.top_p <= 1.0f, "--top-p must be in (0, 1], got {}", options.top_p);
}

int32_t Sampler::next(std::span<const float> logits) {
  FP8KIT_CHECK(!logits.empty(), "sampling from an empty row of logits");
  FP8KIT_CHECK(std::none_of(logits.begin(), logits.end(), [](float v) { return std::isnan(v); }),
               "the model produced NaN logits");
  if (options_.temperature == 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates by descending logit (ties by id), cut to top-k, then to the nucleus.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = options_.top_k > 0 ? std::min<size_t>(static_cast<size_t>(options_.top_k), order.size()) : order.size();
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  order.resize(k);
  std::vector<double> p(k);
  const double top = logits[order[0]], t = options_.temperature;
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += p[i] = std::exp((logits[order[i]] - top) / t);
  size_t kept = k;
  if (options_.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < k; ++i) {
      mass += p[i] / sum;
      if (mass >= options_.top_p) {
        kept = i + 1;
        break;
      }
    }
  }
  const double total = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(kept), 0.0);
  const double u = static_cast<double>(rng_() >> 11) * 0x1p-53 * total;  // a fixed draw (not std::*_distribution)
  double acc = 0;
  for (size_t i = 0; i < kept; ++i) {
    acc += p[i];
    if (u < acc) return order[i];
  }
  return order[kept - 1];
}

}  // namespace fp8kit::infer
