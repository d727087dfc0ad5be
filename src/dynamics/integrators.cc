#include "keycld/dynamics/integrators.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "keycld/util/error.h"
#include "keycld/util/interrupt.h"
#include "keycld/util/text.h"

namespace keycld {
namespace {

// Dormand–Prince 5(4) tableau (Dormand & Prince 1980; Hairer, Nørsett & Wanner, Table II.5.2).
// Row s holds a_{s+1, j}; the last row equals the fifth-order weights (FSAL).
constexpr double kA[6][6] = {
    {1.0 / 5.0, 0, 0, 0, 0, 0},
    {3.0 / 40.0, 9.0 / 40.0, 0, 0, 0, 0},
    {44.0 / 45.0, -56.0 / 15.0, 32.0 / 9.0, 0, 0, 0},
    {19372.0 / 6561.0, -25360.0 / 2187.0, 64448.0 / 6561.0, -212.0 / 729.0, 0, 0},
    {9017.0 / 3168.0, -355.0 / 33.0, 46732.0 / 5247.0, 49.0 / 176.0, -5103.0 / 18656.0, 0},
    {35.0 / 384.0, 0, 500.0 / 1113.0, 125.0 / 192.0, -2187.0 / 6784.0, 11.0 / 84.0}};
// Fifth-order (propagated) and embedded fourth-order weights.
constexpr double kB[7] = {35.0 / 384.0, 0, 500.0 / 1113.0, 125.0 / 192.0, -2187.0 / 6784.0,
                          11.0 / 84.0,  0};
constexpr double kBStar[7] = {
    5179.0 / 57600.0, 0,         7571.0 / 16695.0, 393.0 / 640.0, -92097.0 / 339200.0,
    187.0 / 2100.0,   1.0 / 40.0};
// Step-size controller (as in Hairer's DOPRI5 and torchdiffeq): h ← h · clamp(0.9 · r^(−1/5)).
constexpr double kSafety = 0.9;
constexpr double kMinFactor = 0.2;
constexpr double kMaxFactor = 10.0;

std::string Num(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

bool AllFinite(const torch::Tensor& a, const torch::Tensor& b) {
  torch::NoGradGuard no_grad;
  return (torch::isfinite(a).all() & torch::isfinite(b).all()).item<bool>();
}

// base + h Σ_j c_j k_j over the non-zero coefficients.
torch::Tensor Combine(const torch::Tensor& base, double h, const double* c,
                      const std::vector<torch::Tensor>& k, int n) {
  torch::Tensor out = base;
  for (int j = 0; j < n; ++j) {
    if (c[j] != 0.0) out = out + k[j] * (h * c[j]);
  }
  return out;
}

// max over batch rows of RMS over the row's entries of (x, ẋ) divided by the scale.
double ScaledNorm(const torch::Tensor& ex, const torch::Tensor& ev, const torch::Tensor& sx,
                  const torch::Tensor& sv) {
  torch::NoGradGuard no_grad;
  const torch::Tensor sq = (ex.detach() / sx).square().sum(1) + (ev.detach() / sv).square().sum(1);
  return (sq / static_cast<double>(2 * ex.size(1))).sqrt().max().item<double>();
}

void CheckInputs(const torch::Tensor& x0, const torch::Tensor& xdot0,
                 const std::vector<double>& times, const IntegratorOptions& o) {
  if (!x0.defined() || !xdot0.defined() || x0.dim() != 2 || x0.sizes() != xdot0.sizes() ||
      x0.size(0) < 1 || !torch::isFloatingType(x0.scalar_type()) ||
      x0.scalar_type() != xdot0.scalar_type() || x0.device() != xdot0.device()) {
    throw InputError("Rollout: x0 " + ShapeText(x0) + " and xdot0 " + ShapeText(xdot0) +
                     " (expected floating-point [B, N], B >= 1, equal shape, dtype and device)");
  }
  if (times.empty()) throw InputError("Rollout: times is empty (expected T >= 1 times)");
  for (size_t i = 0; i < times.size(); ++i) {
    if (!std::isfinite(times[i]) || (i > 0 && !(times[i] > times[i - 1]))) {
      throw InputError("Rollout: times[" + std::to_string(i) + "] = " + Num(times[i]) +
                       " (expected finite and strictly increasing)");
    }
  }
  if (o.substeps < 1) {
    throw InputError("Rollout: substeps = " + std::to_string(o.substeps) + " (expected >= 1)");
  }
  if (!(o.rtol > 0) || !(o.atol > 0)) {
    throw InputError("Rollout: rtol = " + Num(o.rtol) + ", atol = " + Num(o.atol) +
                     " (expected both > 0)");
  }
  if (o.max_steps < 1) {
    throw InputError("Rollout: max_steps = " + std::to_string(o.max_steps) + " (expected >= 1)");
  }
  if (!(o.first_step >= 0) || !(o.max_step >= 0)) {
    throw InputError("Rollout: first_step = " + Num(o.first_step) + ", max_step = " +
                     Num(o.max_step) + " (expected >= 0; 0 = automatic / unlimited)");
  }
}

Trajectory FixedStepRollout(const AccelerationFn& acc, const torch::Tensor& x0,
                            const torch::Tensor& xdot0, const std::vector<double>& times,
                            IntegratorMethod method, const IntegratorOptions& o) {
  Trajectory out;
  std::vector<torch::Tensor> xs{x0}, vs{xdot0};
  torch::Tensor x = x0, v = xdot0;
  const int evals_per_step = EvaluationsPerStep(method);
  for (size_t i = 1; i < times.size(); ++i) {
    // As Dormand–Prince below: Ctrl-C stops at the next output time (no effect without a guard).
    if (InterruptRequested()) throw Interrupted("interrupted during the rollout");
    const double dt = (times[i] - times[i - 1]) / o.substeps;
    for (int s = 0; s < o.substeps; ++s) {
      PhaseState next = FixedStep(method, acc, x, v, dt);
      x = next.x;
      v = next.xdot;
      ++out.accepted_steps;
      out.evaluations += evals_per_step;
    }
    if (o.check_finite && !AllFinite(x, v)) {
      throw NumericalError("Rollout (" + IntegratorMethodString(method) +
                           "): non-finite state at t = " + Num(times[i]) + " s (step " + Num(dt) +
                           " s); the dynamics diverged");
    }
    xs.push_back(x);
    vs.push_back(v);
  }
  out.x = torch::stack(xs, 1);
  out.xdot = torch::stack(vs, 1);
  return out;
}

Trajectory Dopri5Rollout(const AccelerationFn& acc, const torch::Tensor& x0,
                         const torch::Tensor& xdot0, const std::vector<double>& times,
                         const IntegratorOptions& o) {
  Trajectory out;
  std::vector<torch::Tensor> xs{x0}, vs{xdot0};
  torch::Tensor x = x0, v = xdot0;
  torch::Tensor a = acc(x, v);
  ++out.evaluations;
  if (!AllFinite(a, v)) {
    throw NumericalError("Rollout (dopri5): non-finite acceleration or velocity at t = " +
                         Num(times[0]) + " s (the initial state)");
  }

  double h = o.first_step;
  if (h == 0.0 && times.size() > 1) {
    // Starting step (Hairer, Nørsett & Wanner, Solving ODEs I, §II.4), on y = (x, ẋ), f = (ẋ, ẍ).
    torch::NoGradGuard no_grad;
    const torch::Tensor xd = x.detach(), vd = v.detach(), ad = a.detach();
    const torch::Tensor sx = o.atol + o.rtol * xd.abs(), sv = o.atol + o.rtol * vd.abs();
    const double d0 = ScaledNorm(xd, vd, sx, sv);
    const double d1 = ScaledNorm(vd, ad, sx, sv);
    double h0 = (d0 < 1e-5 || d1 < 1e-5) ? 1e-6 : 0.01 * d0 / d1;
    h0 = std::min(h0, times.back() - times.front());
    const torch::Tensor x1 = xd + h0 * vd, v1 = vd + h0 * ad;
    torch::Tensor a1;
    {
      torch::AutoGradMode enable(true);  // the acceleration may differentiate a potential
      a1 = acc(x1, v1).detach();
    }
    ++out.evaluations;
    const double d2 = ScaledNorm(v1 - vd, a1 - ad, sx, sv) / h0;
    const double dmax = std::max(d1, d2);
    const double h1 = (!std::isfinite(dmax) || dmax <= 1e-15) ? std::max(1e-6, h0 * 1e-3)
                                                              : std::pow(0.01 / dmax, 0.2);
    h = std::min(100.0 * h0, h1);
  }
  if (o.max_step > 0) h = std::min(h, o.max_step);

  double t = times[0];
  std::vector<torch::Tensor> kx(7), kv(7);
  for (size_t i = 1; i < times.size(); ++i) {
    const double target = times[i];
    // A long prediction stops at the next output time after Ctrl-C (no effect without a guard).
    if (InterruptRequested()) throw Interrupted("interrupted during the rollout");
    while (t < target) {
      if (out.accepted_steps + out.rejected_steps >= o.max_steps) {
        throw NumericalError(
            "Rollout (dopri5): step budget max_steps = " + std::to_string(o.max_steps) +
            " exhausted at t = " + Num(t) + " s of " + Num(times.back()) + " s (" +
            std::to_string(out.accepted_steps) + " accepted, " +
            std::to_string(out.rejected_steps) + " rejected, step " + Num(h) + " s, rtol = " +
            Num(o.rtol) + ", atol = " + Num(o.atol) + "); the dynamics are stiff or diverging");
      }
      const double remaining = target - t;
      const bool lands = h >= remaining;
      const double step = lands ? remaining : h;

      kx[0] = v;
      kv[0] = a;
      torch::Tensor xn, vn;
      for (int s = 1; s < 7; ++s) {
        xn = Combine(x, step, kA[s - 1], kx, s);
        vn = Combine(v, step, kA[s - 1], kv, s);
        kx[s] = vn;
        kv[s] = acc(xn, vn);
        ++out.evaluations;
      }
      // Embedded error estimate h Σ (b_j − b*_j) k_j.
      torch::Tensor ex, ev;
      {
        torch::NoGradGuard no_grad;
        ex = torch::zeros_like(x);
        ev = torch::zeros_like(v);
        for (int j = 0; j < 7; ++j) {
          const double e = step * (kB[j] - kBStar[j]);
          if (e != 0.0) {
            ex = ex + kx[j].detach() * e;
            ev = ev + kv[j].detach() * e;
          }
        }
      }
      double ratio;
      {
        torch::NoGradGuard no_grad;
        const torch::Tensor sx = o.atol + o.rtol * torch::max(x.detach().abs(), xn.detach().abs());
        const torch::Tensor sv = o.atol + o.rtol * torch::max(v.detach().abs(), vn.detach().abs());
        ratio = ScaledNorm(ex, ev, sx, sv);
      }
      const bool finite = std::isfinite(ratio);
      if (finite && ratio <= 1.0) {
        t = lands ? target : t + step;
        x = xn;
        v = vn;
        a = kv[6];  // first same as last
        ++out.accepted_steps;
        const double factor =
            ratio == 0.0 ? kMaxFactor
                         : std::clamp(kSafety * std::pow(ratio, -0.2), kMinFactor, kMaxFactor);
        // A step shortened to land on an output time keeps the longer proposal.
        h = lands ? std::max(h, step * factor) : step * factor;
      } else {
        ++out.rejected_steps;
        const double factor =
            finite ? std::clamp(kSafety * std::pow(ratio, -0.2), kMinFactor, 1.0) : kMinFactor;
        h = step * factor;
      }
      if (o.max_step > 0) h = std::min(h, o.max_step);
      if (h < 1e-14 * std::max(1.0, std::abs(t))) {
        throw NumericalError(
            std::string("Rollout (dopri5): step size underflow (") + Num(h) +
            " s) at t = " + Num(t) + " s" +
            (finite ? " (rtol = " + Num(o.rtol) + ", atol = " + Num(o.atol) + " cannot be met)"
                    : "; the states became non-finite (the dynamics diverged)"));
      }
    }
    xs.push_back(x);
    vs.push_back(v);
  }
  out.x = torch::stack(xs, 1);
  out.xdot = torch::stack(vs, 1);
  return out;
}

}  // namespace

IntegratorMethod ParseIntegratorMethod(const std::string& name) {
  return ParseName<IntegratorMethod>(name);
}

bool IsFixedStep(IntegratorMethod method) { return method != IntegratorMethod::kDopri5; }

int EvaluationsPerStep(IntegratorMethod method) {
  switch (method) {
    case IntegratorMethod::kEuler:
      return 1;
    case IntegratorMethod::kVerlet:
      return 2;
    case IntegratorMethod::kRk4:
      return 4;
    case IntegratorMethod::kDopri5:
      break;
  }
  throw InputError("EvaluationsPerStep: dopri5 has no fixed number of evaluations per step");
}

std::string IntegratorMethodString(IntegratorMethod method) { return NameOf(method); }

PhaseState EulerStep(const AccelerationFn& acc, const torch::Tensor& x, const torch::Tensor& xdot,
                     double dt) {
  const torch::Tensor a = acc(x, xdot);
  return {x + xdot * dt, xdot + a * dt};
}

PhaseState Rk4Step(const AccelerationFn& acc, const torch::Tensor& x, const torch::Tensor& xdot,
                   double dt) {
  const torch::Tensor& v1 = xdot;
  const torch::Tensor a1 = acc(x, v1);
  const torch::Tensor v2 = xdot + a1 * (0.5 * dt);
  const torch::Tensor a2 = acc(x + v1 * (0.5 * dt), v2);
  const torch::Tensor v3 = xdot + a2 * (0.5 * dt);
  const torch::Tensor a3 = acc(x + v2 * (0.5 * dt), v3);
  const torch::Tensor v4 = xdot + a3 * dt;
  const torch::Tensor a4 = acc(x + v3 * dt, v4);
  return {x + (v1 + 2.0 * v2 + 2.0 * v3 + v4) * (dt / 6.0),
          xdot + (a1 + 2.0 * a2 + 2.0 * a3 + a4) * (dt / 6.0)};
}

PhaseState VerletStep(const AccelerationFn& acc, const torch::Tensor& x, const torch::Tensor& xdot,
                      double dt) {
  const torch::Tensor a = acc(x, xdot);
  const torch::Tensor x_next = x + xdot * dt + a * (0.5 * dt * dt);
  const torch::Tensor a_next = acc(x_next, xdot + a * dt);
  return {x_next, xdot + (a + a_next) * (0.5 * dt)};
}

PhaseState FixedStep(IntegratorMethod method, const AccelerationFn& acc, const torch::Tensor& x,
                     const torch::Tensor& xdot, double dt) {
  switch (method) {
    case IntegratorMethod::kEuler:
      return EulerStep(acc, x, xdot, dt);
    case IntegratorMethod::kRk4:
      return Rk4Step(acc, x, xdot, dt);
    case IntegratorMethod::kVerlet:
      return VerletStep(acc, x, xdot, dt);
    case IntegratorMethod::kDopri5:
      break;
  }
  throw InputError("FixedStep: dopri5 is adaptive (expected euler, rk4 or verlet)");
}

Trajectory Rollout(const AccelerationFn& acc, const torch::Tensor& x0, const torch::Tensor& xdot0,
                   const std::vector<double>& times, IntegratorMethod method,
                   const IntegratorOptions& options) {
  CheckInputs(x0, xdot0, times, options);
  if (method == IntegratorMethod::kDopri5) return Dopri5Rollout(acc, x0, xdot0, times, options);
  return FixedStepRollout(acc, x0, xdot0, times, method, options);
}

Trajectory Rollout(const AccelerationFn& acc, const torch::Tensor& x0, const torch::Tensor& xdot0,
                   double dt, int64_t steps, IntegratorMethod method,
                   const IntegratorOptions& options) {
  if (!(dt > 0) || !std::isfinite(dt) || steps < 0) {
    throw InputError("Rollout: dt = " + Num(dt) + " s, steps = " + std::to_string(steps) +
                     " (expected dt > 0 and steps >= 0)");
  }
  std::vector<double> times(static_cast<size_t>(steps) + 1);
  for (size_t i = 0; i < times.size(); ++i) times[i] = static_cast<double>(i) * dt;
  return Rollout(acc, x0, xdot0, times, method, options);
}

}  // namespace keycld
