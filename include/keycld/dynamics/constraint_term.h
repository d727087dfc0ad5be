// The primitives of holonomic constraints on keypoints (docs/method.md §4, docs/systems.md), as
// plain data: what system description files list and checkpoints store. The tensor functions
// Φ, D and h that use them are in dynamics/constraints.h.
#pragma once

#include <string>

namespace keycld {

/// One scalar holonomic constraint Φ_c(x) = 0 on the state x = (x₁, y₁, …, x_K, y_K). Lengths,
/// points and coordinate values are in normalized image coordinates (docs/method.md §2).
struct ConstraintTerm {
  enum class Kind {
    /// Φ = x[a] − value (a point on an axis-parallel rail, e.g. the cartpole's y₁ = 0).
    kFixedCoordinate,
    /// Φ = ‖p_a − c‖ − value with c = (px, py) (a point on a circle around a fixed pivot; the
    /// built-in systems' pivot is the image centre).
    kFixedDistanceToPoint,
    /// Φ = ‖p_a − p_b‖ − value (a rigid link between two points).
    kFixedDistance,
    /// Φ = n·p_a − value with the unit normal n = (px, py) (a point on any straight line).
    kOnLine,
  };
  Kind kind = Kind::kFixedCoordinate;
  /// State index in [0, 2K) for kFixedCoordinate; keypoint index in [0, K) otherwise.
  int a = 0;
  /// Second keypoint index for kFixedDistance; unused (−1) otherwise.
  int b = -1;
  /// Coordinate value, length or line offset (normalized image coordinates).
  double value = 0.0;
  /// The pivot c of kFixedDistanceToPoint or the unit normal n of kOnLine; unused otherwise.
  double px = 0.0, py = 0.0;

  static ConstraintTerm FixedCoordinate(int state_index, double value);
  /// ‖p_k‖ − length: the circle around the image centre.
  static ConstraintTerm FixedDistanceToOrigin(int keypoint, double length);
  static ConstraintTerm FixedDistanceToPoint(int keypoint, double cx, double cy, double length);
  static ConstraintTerm FixedDistance(int keypoint_a, int keypoint_b, double length);
  /// n·p_k − offset with n = (nx, ny) / ‖(nx, ny)‖; InputError for a zero normal.
  static ConstraintTerm OnLine(int keypoint, double nx, double ny, double offset);

  bool operator==(const ConstraintTerm&) const = default;
};

/// One term as text with 1-based keypoints, e.g. "|p1 - p2| - 0.5", "y1 - 0".
std::string DescribeConstraintTerm(const ConstraintTerm& term);

}  // namespace keycld
