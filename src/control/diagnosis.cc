#include "keycld/control/diagnosis.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "keycld/util/error.h"

namespace keycld {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kNegligibleReference = 1e-9;  // actuator units

void CheckWidth(const std::vector<double>& v, size_t width, size_t step, const char* what) {
  if (v.size() != width) {
    throw InputError("step " + std::to_string(step) + ": " + what + " has " +
                     std::to_string(v.size()) + " component(s), expected " + std::to_string(width) +
                     (v.empty() ? " (no reference controller ran: ClosedLoop::SetReference)" : ""));
  }
}

// model(step, i) against reference(step, i) for each actuator i.
template <typename Model, typename Reference>
TermComparison Compare(const std::vector<ControlStep>& steps, size_t width, Model model,
                       Reference reference) {
  TermComparison out;
  for (size_t i = 0; i < width; ++i) {
    std::vector<double> m, r;
    m.reserve(steps.size());
    r.reserve(steps.size());
    for (const ControlStep& s : steps) {
      m.push_back(model(s, i));
      r.push_back(reference(s, i));
    }
    const std::vector<double> c = CompareSeries(m, r);
    out.slope.push_back(c[0]);
    out.r2.push_back(c[1]);
    out.rms_model.push_back(c[2]);
    out.rms_reference.push_back(c[3]);
    out.rms_difference.push_back(c[4]);
    out.median_ratio.push_back(c[5]);
  }
  return out;
}

}  // namespace

std::vector<double> CompareSeries(const std::vector<double>& model,
                                  const std::vector<double>& reference) {
  if (model.empty() || model.size() != reference.size()) {
    throw InputError("a comparison needs two series of the same length ≥ 1, got " +
                     std::to_string(model.size()) + " and " + std::to_string(reference.size()));
  }
  const double n = double(model.size());
  double mr = 0, rr = 0, mm = 0, mean = 0, dd = 0;
  for (size_t t = 0; t < model.size(); ++t) {
    mr += model[t] * reference[t];
    rr += reference[t] * reference[t];
    mm += model[t] * model[t];
    mean += model[t];
    const double d = model[t] - reference[t];
    dd += d * d;
  }
  mean /= n;
  // A reference below 1e-9 actuator units is rounding (the cart's gravity part on its rail):
  // no ratio to it means anything.
  const double rms_reference = std::sqrt(rr / n);
  const bool reference_zero = rms_reference <= kNegligibleReference;
  const double slope = reference_zero ? kNaN : mr / rr;
  double residual = 0, total = 0;
  for (size_t t = 0; t < model.size(); ++t) {
    const double e = model[t] - (reference_zero ? 0.0 : slope) * reference[t];
    residual += e * e;
    total += (model[t] - mean) * (model[t] - mean);
  }
  const double r2 = total > 0 ? 1.0 - residual / total : kNaN;
  std::vector<double> ratios;
  for (size_t t = 0; t < model.size(); ++t) {
    if (!reference_zero && std::abs(reference[t]) >= 0.1 * rms_reference) {
      ratios.push_back(model[t] / reference[t]);
    }
  }
  double median = kNaN;
  if (!ratios.empty()) {
    const size_t h = ratios.size() / 2;
    std::nth_element(ratios.begin(), ratios.begin() + h, ratios.end());
    median = ratios[h];
    if (ratios.size() % 2 == 0) {
      median = 0.5 * (median + *std::max_element(ratios.begin(), ratios.begin() + h));
    }
  }
  return {slope, r2, std::sqrt(mm / n), rms_reference, std::sqrt(dd / n), median};
}

ReferenceComparison CompareWithReference(const std::vector<ControlStep>& steps) {
  if (steps.empty()) throw InputError("no control steps to compare");
  const size_t width = steps.front().unclipped.size();
  for (size_t t = 0; t < steps.size(); ++t) {
    CheckWidth(steps[t].unclipped, width, t, "the action");
    CheckWidth(steps[t].gravity, width, t, "the gravity part");
    CheckWidth(steps[t].reference_unclipped, width, t, "the reference action");
    CheckWidth(steps[t].reference_gravity, width, t, "the reference gravity part");
    CheckWidth(steps[t].input_acceleration, width, t, "the input acceleration");
    CheckWidth(steps[t].reference_input_acceleration, width, t, "the reference input acceleration");
  }
  ReferenceComparison out;
  out.steps = steps.size();
  out.action = Compare(
      steps, width, [](const ControlStep& s, size_t i) { return s.unclipped[i]; },
      [](const ControlStep& s, size_t i) { return s.reference_unclipped[i]; });
  out.gravity = Compare(
      steps, width, [](const ControlStep& s, size_t i) { return s.gravity[i]; },
      [](const ControlStep& s, size_t i) { return s.reference_gravity[i]; });
  out.feedback = Compare(
      steps, width, [](const ControlStep& s, size_t i) { return s.unclipped[i] - s.gravity[i]; },
      [](const ControlStep& s, size_t i) {
        return s.reference_unclipped[i] - s.reference_gravity[i];
      });
  out.input_acceleration = Compare(
      steps, width, [](const ControlStep& s, size_t i) { return s.input_acceleration[i]; },
      [](const ControlStep& s, size_t i) { return s.reference_input_acceleration[i]; });
  return out;
}

}  // namespace keycld
