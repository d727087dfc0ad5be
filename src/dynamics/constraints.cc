#include "keycld/dynamics/constraints.h"

#include <torch/torch.h>

#include <cmath>
#include <sstream>
#include <utility>

#include "keycld/util/error.h"
#include "keycld/util/text.h"

namespace keycld {
namespace {

// Regularised norm r = sqrt(‖d‖² + ε²) of rows d [B, 2].
torch::Tensor RegularisedNorm(const torch::Tensor& d) {
  return (d.square().sum(1) + HolonomicConstraints::kNormEpsilonSquared).sqrt();
}

// Block of a state row: coordinates (x_k, y_k) of keypoint k, [B, 2].
torch::Tensor Point(const torch::Tensor& x, int k) { return x.narrow(1, 2 * k, 2); }

// p_a − c of a distance-to-point term, [B, 2]; p_a itself for the image centre (c = 0), so that
// the built-in systems compute exactly what they did before the pivot became a parameter.
torch::Tensor Relative(const torch::Tensor& x, const ConstraintTerm& t) {
  const torch::Tensor p = Point(x, t.a);
  if (t.px == 0.0 && t.py == 0.0) return p;
  return p - torch::tensor({t.px, t.py}, x.options()).unsqueeze(0);
}

// Row of D [B, 2K] from per-keypoint gradient blocks (absent blocks are zero).
torch::Tensor RowFromBlocks(const torch::Tensor& x, int num_keypoints,
                            const std::vector<std::pair<int, torch::Tensor>>& blocks) {
  std::vector<torch::Tensor> parts(num_keypoints);
  for (const auto& [k, g] : blocks) parts[k] = parts[k].defined() ? parts[k] + g : g;
  for (auto& p : parts) {
    if (!p.defined()) p = torch::zeros({x.size(0), 2}, x.options());
  }
  return torch::cat(parts, 1);
}

}  // namespace

ConstraintTerm ConstraintTerm::FixedCoordinate(int state_index, double value) {
  return {Kind::kFixedCoordinate, state_index, -1, value};
}

ConstraintTerm ConstraintTerm::FixedDistanceToOrigin(int keypoint, double length) {
  return {Kind::kFixedDistanceToPoint, keypoint, -1, length};
}

ConstraintTerm ConstraintTerm::FixedDistanceToPoint(int keypoint, double cx, double cy,
                                                    double length) {
  return {Kind::kFixedDistanceToPoint, keypoint, -1, length, cx, cy};
}

ConstraintTerm ConstraintTerm::FixedDistance(int keypoint_a, int keypoint_b, double length) {
  return {Kind::kFixedDistance, keypoint_a, keypoint_b, length};
}

ConstraintTerm ConstraintTerm::OnLine(int keypoint, double nx, double ny, double offset) {
  const double norm = std::hypot(nx, ny);
  if (!(norm > 0) || !std::isfinite(norm)) {
    throw InputError("ConstraintTerm::OnLine: the normal (" + std::to_string(nx) + ", " +
                     std::to_string(ny) + ") must be finite and non-zero");
  }
  return {Kind::kOnLine, keypoint, -1, offset, nx / norm, ny / norm};
}

HolonomicConstraints::HolonomicConstraints(int num_keypoints, std::vector<ConstraintTerm> terms)
    : num_keypoints_(num_keypoints), terms_(std::move(terms)) {
  if (num_keypoints_ < 1) {
    throw InputError("HolonomicConstraints: num_keypoints = " + std::to_string(num_keypoints_) +
                     " (expected >= 1)");
  }
  for (size_t i = 0; i < terms_.size(); ++i) {
    const ConstraintTerm& t = terms_[i];
    const std::string where = "HolonomicConstraints: term " + std::to_string(i);
    switch (t.kind) {
      case ConstraintTerm::Kind::kFixedCoordinate:
        if (t.a < 0 || t.a >= 2 * num_keypoints_) {
          throw InputError(where + " state index " + std::to_string(t.a) + " (expected 0.." +
                           std::to_string(2 * num_keypoints_ - 1) + ")");
        }
        break;
      case ConstraintTerm::Kind::kFixedDistance:
        if (t.b < 0 || t.b >= num_keypoints_ || t.b == t.a) {
          throw InputError(where + " second keypoint " + std::to_string(t.b) + " (expected 0.." +
                           std::to_string(num_keypoints_ - 1) + ", different from the first)");
        }
        [[fallthrough]];
      case ConstraintTerm::Kind::kFixedDistanceToPoint:
      case ConstraintTerm::Kind::kOnLine:
        if (t.a < 0 || t.a >= num_keypoints_) {
          throw InputError(where + " keypoint " + std::to_string(t.a) + " (expected 0.." +
                           std::to_string(num_keypoints_ - 1) + ")");
        }
        break;
    }
  }
}

HolonomicConstraints HolonomicConstraints::ForEnvironment(EnvName env) {
  switch (env) {
    case EnvName::kPendulum:
      return HolonomicConstraints(1, {ConstraintTerm::FixedDistanceToOrigin(0, 0.5)});
    case EnvName::kCartpole:
      return HolonomicConstraints(
          2, {ConstraintTerm::FixedCoordinate(1, 0.0), ConstraintTerm::FixedDistance(0, 1, 0.5)});
    case EnvName::kAcrobot:
      return HolonomicConstraints(2, {ConstraintTerm::FixedDistanceToOrigin(0, 0.3),
                                      ConstraintTerm::FixedDistance(0, 1, 0.3)});
    case EnvName::kCustom:
      break;
  }
  throw InputError(
      "HolonomicConstraints::ForEnvironment: a custom system's constraints come from its "
      "description (the model spec), not from its name");
}

HolonomicConstraints HolonomicConstraints::None(int num_keypoints) {
  return HolonomicConstraints(num_keypoints, {});
}

void HolonomicConstraints::CheckState(const torch::Tensor& t, const char* what) const {
  if (!t.defined() || t.dim() != 2 || t.size(1) != state_dim() ||
      !torch::isFloatingType(t.scalar_type())) {
    throw InputError(std::string("holonomic constraints: ") + what + " has shape " + ShapeText(t) +
                     " (expected a floating-point [B, " + std::to_string(state_dim()) + "])");
  }
}

torch::Tensor HolonomicConstraints::Phi(const torch::Tensor& x) const {
  CheckState(x, "x");
  if (terms_.empty()) return torch::zeros({x.size(0), 0}, x.options());
  std::vector<torch::Tensor> phi;
  phi.reserve(terms_.size());
  for (const ConstraintTerm& t : terms_) {
    switch (t.kind) {
      case ConstraintTerm::Kind::kFixedCoordinate:
        phi.push_back(x.select(1, t.a) - t.value);
        break;
      case ConstraintTerm::Kind::kFixedDistanceToPoint:
        phi.push_back(RegularisedNorm(Relative(x, t)) - t.value);
        break;
      case ConstraintTerm::Kind::kOnLine:
        phi.push_back(x.select(1, 2 * t.a) * t.px + x.select(1, 2 * t.a + 1) * t.py - t.value);
        break;
      case ConstraintTerm::Kind::kFixedDistance:
        phi.push_back(RegularisedNorm(Point(x, t.a) - Point(x, t.b)) - t.value);
        break;
    }
  }
  return torch::stack(phi, 1);
}

torch::Tensor HolonomicConstraints::Jacobian(const torch::Tensor& x) const {
  CheckState(x, "x");
  const int64_t batch = x.size(0);
  if (terms_.empty()) return torch::zeros({batch, 0, state_dim()}, x.options());
  std::vector<torch::Tensor> rows;
  rows.reserve(terms_.size());
  for (const ConstraintTerm& t : terms_) {
    switch (t.kind) {
      case ConstraintTerm::Kind::kFixedCoordinate: {
        torch::Tensor row = torch::zeros({batch, state_dim()}, x.options());
        row.select(1, t.a).fill_(1.0);
        rows.push_back(row);
        break;
      }
      case ConstraintTerm::Kind::kOnLine: {
        torch::Tensor row = torch::zeros({batch, state_dim()}, x.options());
        row.select(1, 2 * t.a).fill_(t.px);
        row.select(1, 2 * t.a + 1).fill_(t.py);
        rows.push_back(row);
        break;
      }
      case ConstraintTerm::Kind::kFixedDistanceToPoint: {
        // ∂‖p − c‖_ε/∂p = (p − c) / r.
        const torch::Tensor p = Relative(x, t);
        const torch::Tensor g = p / RegularisedNorm(p).unsqueeze(1);
        rows.push_back(RowFromBlocks(x, num_keypoints_, {{t.a, g}}));
        break;
      }
      case ConstraintTerm::Kind::kFixedDistance: {
        // d = p_a − p_b: ∂/∂p_a = d / r, ∂/∂p_b = −d / r.
        const torch::Tensor d = Point(x, t.a) - Point(x, t.b);
        const torch::Tensor g = d / RegularisedNorm(d).unsqueeze(1);
        rows.push_back(RowFromBlocks(x, num_keypoints_, {{t.a, g}, {t.b, -g}}));
        break;
      }
    }
  }
  return torch::stack(rows, 1);
}

torch::Tensor HolonomicConstraints::Curvature(const torch::Tensor& x,
                                              const torch::Tensor& xdot) const {
  CheckState(x, "x");
  CheckState(xdot, "xdot");
  if (x.size(0) != xdot.size(0)) {
    throw InputError("holonomic constraints: x has shape " + ShapeText(x) + " but xdot " +
                     ShapeText(xdot) + " (expected equal shapes)");
  }
  if (terms_.empty()) return torch::zeros({x.size(0), 0}, x.options());
  // For r(d) = sqrt(‖d‖² + ε²): ∇²r = I / r − d dᵀ / r³, so
  // wᵀ ∇²r w = ‖w‖² / r − (d·w)² / r³ with w the velocity of d.
  auto norm_curvature = [](const torch::Tensor& d, const torch::Tensor& w) {
    const torch::Tensor r = RegularisedNorm(d);
    const torch::Tensor dw = (d * w).sum(1);
    return w.square().sum(1) / r - dw.square() / r.pow(3);
  };
  std::vector<torch::Tensor> h;
  h.reserve(terms_.size());
  for (const ConstraintTerm& t : terms_) {
    switch (t.kind) {
      case ConstraintTerm::Kind::kFixedCoordinate:
      case ConstraintTerm::Kind::kOnLine:
        h.push_back(torch::zeros({x.size(0)}, x.options()));
        break;
      case ConstraintTerm::Kind::kFixedDistanceToPoint:
        h.push_back(norm_curvature(Relative(x, t), Point(xdot, t.a)));
        break;
      case ConstraintTerm::Kind::kFixedDistance:
        h.push_back(
            norm_curvature(Point(x, t.a) - Point(x, t.b), Point(xdot, t.a) - Point(xdot, t.b)));
        break;
    }
  }
  return torch::stack(h, 1);
}

std::string DescribeConstraintTerm(const ConstraintTerm& t) {
  std::ostringstream out;
  switch (t.kind) {
    case ConstraintTerm::Kind::kFixedCoordinate:
      out << (t.a % 2 == 0 ? "x" : "y") << (t.a / 2 + 1) << " - " << t.value;
      break;
    case ConstraintTerm::Kind::kFixedDistanceToPoint:
      if (t.px == 0.0 && t.py == 0.0) {
        out << "|p" << (t.a + 1) << "| - " << t.value;
      } else {
        out << "|p" << (t.a + 1) << " - (" << t.px << ", " << t.py << ")| - " << t.value;
      }
      break;
    case ConstraintTerm::Kind::kFixedDistance:
      out << "|p" << (t.a + 1) << " - p" << (t.b + 1) << "| - " << t.value;
      break;
    case ConstraintTerm::Kind::kOnLine:
      out << t.px << "*x" << (t.a + 1) << " + " << t.py << "*y" << (t.a + 1) << " - " << t.value;
      break;
  }
  return out.str();
}

std::string HolonomicConstraints::Describe() const {
  if (terms_.empty()) return "none";
  std::string out;
  for (size_t i = 0; i < terms_.size(); ++i) {
    out += (i > 0 ? "; " : "") + DescribeConstraintTerm(terms_[i]);
  }
  return out;
}

}  // namespace keycld
