// The one summary of a sample that reports use: mean, standard deviation, median.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace keycld {

struct Summary {
  double mean = 0;
  double std = 0;     // population standard deviation (divides by n)
  double median = 0;  // mean of the two middle values for an even n
  size_t n = 0;
};

/// Summary of `values` (all zeros for an empty sample).
template <typename T>
Summary Summarize(const std::vector<T>& values) {
  Summary s;
  s.n = values.size();
  if (values.empty()) return s;
  for (T v : values) s.mean += double(v);
  s.mean /= double(s.n);
  for (T v : values) s.std += (double(v) - s.mean) * (double(v) - s.mean);
  s.std = std::sqrt(s.std / double(s.n));
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  s.median = s.n % 2 ? sorted[s.n / 2] : 0.5 * (sorted[s.n / 2 - 1] + sorted[s.n / 2]);
  return s;
}

/// Sample standard deviation (divides by n − 1; 0 for n < 2): the spread of per-seed means.
template <typename T>
double SampleStd(const std::vector<T>& values) {
  if (values.size() < 2) return 0;
  const Summary s = Summarize(values);
  return s.std * std::sqrt(double(s.n) / double(s.n - 1));
}

}  // namespace keycld
