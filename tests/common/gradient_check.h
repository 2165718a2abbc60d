// Finite-difference gradient checks for layer tests: central differences of a scalar loss that is
// accumulated in double, compared with the analytic gradient element by element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace fp8kit::testing {

inline std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// sum_i y_i w_i in double: a probe loss whose gradient wrt y is w.
inline double probe(std::span<const float> y, std::span<const float> w) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * w[i];
  return s;
}

// For up to max_checks evenly spread elements of x: (loss(x + h) - loss(x - h)) / 2h against
// analytic[i], within atol + rtol * max(|fd|, |analytic|). loss() recomputes from x's current values.
inline void expect_gradient_close(std::span<float> x, std::span<const float> analytic,
                                  const std::function<double()>& loss, double h, double atol, double rtol,
                                  const std::string& what, size_t max_checks = 48) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const size_t stride = std::max<size_t>(1, x.size() / max_checks);
  int failures = 0;
  for (size_t i = 0; i < x.size() && failures < 5; i += stride) {
    const float saved = x[i];
    x[i] = static_cast<float>(saved + h);
    const double plus = loss();
    x[i] = static_cast<float>(saved - h);
    const double minus = loss();
    x[i] = saved;
    const double step = static_cast<double>(static_cast<float>(saved + h)) - static_cast<float>(saved - h);
    const double fd = (plus - minus) / step;
    const double a = analytic[i];
    const double tol = atol + rtol * std::max(std::abs(fd), std::abs(a));
    if (!(std::abs(fd - a) <= tol)) {
      ++failures;
      ADD_FAILURE() << what << "[" << i << "]: finite difference " << fd << " vs analytic " << a;
    }
  }
}

}  // namespace fp8kit::testing
