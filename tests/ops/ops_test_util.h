// Shared helpers of the op kernel tests: seeded random inputs, the closeness criterion with its
// declared tolerance, and the central finite-difference gradient check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace sluice::kernels::testing {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  template <typename T = float>
  std::vector<T> Uniform(int64_t n, double lo = -1.0, double hi = 1.0) {
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<T> out(n);
    for (T& value : out) value = static_cast<T>(dist(engine_));
    return out;
  }

  std::vector<int32_t> Ints(int64_t n, int32_t lo, int32_t hi) {  // inclusive
    std::uniform_int_distribution<int32_t> dist(lo, hi);
    std::vector<int32_t> out(n);
    for (int32_t& value : out) value = dist(engine_);
    return out;
  }

  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

inline std::vector<double> ToDouble(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

// The closeness criterion: |actual - expected| <= tol * (|expected| + max_j |expected_j|) for
// every element. The array's largest magnitude stands in for the size of the terms a reduction
// summed, so an output that cancels to near zero is judged against the rounding of its terms,
// not against itself.
template <typename A, typename E>
void ExpectClose(const std::vector<A>& actual, const std::vector<E>& expected, double tol,
                 const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double scale = 0.0;
  for (E e : expected) scale = std::max(scale, std::abs(static_cast<double>(e)));
  double worst = 0.0;
  int64_t worst_index = -1;
  int failures = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = static_cast<double>(actual[i]);
    const double e = static_cast<double>(expected[i]);
    const double bound = tol * (std::abs(e) + scale);
    const double err = std::abs(a - e);
    if (!(err <= bound)) {  // also catches NaN
      if (++failures <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: got " << a << ", want " << e << " (error " << err
                      << " > bound " << bound << ")";
      }
    }
    if (scale > 0 && err / scale > worst) {
      worst = err / scale;
      worst_index = static_cast<int64_t>(i);
    }
  }
  if (std::getenv("SLUICE_OPS_TEST_VERBOSE") != nullptr) {
    std::fprintf(stderr, "%-50s worst relative error %.3g (tol %.1g)\n", what.c_str(), worst, tol);
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << actual.size()
                         << " elements outside tolerance " << tol << "; worst relative error "
                         << worst << " at " << worst_index;
}

// Central finite differences in fp64: for every element of param, (L(p + h) - L(p - h)) / 2h
// must match analytic[i] within tol * (|analytic[i]| + max |analytic|). objective reads param
// through the reference it captured. Also fails when the analytic gradient is all zero, so a
// backward that does nothing cannot pass.
inline void ExpectGradientMatches(std::vector<double>& param, const std::vector<double>& analytic,
                                  const std::function<double()>& objective, const std::string& what,
                                  double h = 1e-6, double tol = 1e-6) {
  ASSERT_EQ(param.size(), analytic.size()) << what;
  std::vector<double> numeric(param.size());
  for (size_t i = 0; i < param.size(); ++i) {
    const double saved = param[i];
    param[i] = saved + h;
    const double plus = objective();
    param[i] = saved - h;
    const double minus = objective();
    param[i] = saved;
    numeric[i] = (plus - minus) / (2 * h);
  }
  double scale = 0.0;
  for (double g : analytic) scale = std::max(scale, std::abs(g));
  EXPECT_GT(scale, 0.0) << what << ": the analytic gradient is all zero";
  ExpectClose(analytic, numeric, tol, what + " (analytic vs finite differences)");
}

// sum_i w[i] * y[i]: the scalar whose gradient with respect to y is w (the upstream gradient).
inline double Dot(const std::vector<double>& w, const std::vector<double>& y) {
  double sum = 0.0;
  for (size_t i = 0; i < w.size(); ++i) sum += w[i] * y[i];
  return sum;
}

}  // namespace sluice::kernels::testing
