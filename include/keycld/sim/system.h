// System description files (docs/systems.md): a planar mechanism given by an MJCF model, a
// camera, the sites that are the keypoints, the holonomic constraints on them as a list of
// primitives, and the sampling ranges of the data protocol (docs/method.md §7). The three
// built-in systems are such files too (assets/systems/<name>.toml). No MuJoCo here: resolving
// the parts that need the model (a pivot given as a site, lengths to measure) and checking the
// constraints on the initial states is Environment's job (sim/environment.h).
#pragma once

#include <array>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "keycld/dynamics/constraint_term.h"
#include "keycld/sim/env_name.h"

namespace keycld {

/// A uniform sampling interval [lo, hi).
struct SampleRange {
  double lo = 0.0, hi = 0.0;
};

/// One axis of the state grid for plots: count values lo + (hi − lo)·i / count, i = 0 … count−1.
struct GridAxis {
  double lo = 0.0, hi = 0.0;
  int count = 0;
};

/// One constraint as a description file writes it. Keypoints are 1-based in the file (p₁, p₂ as
/// in docs/method.md §4) and 0-based here.
struct ConstraintSpec {
  enum class Type {
    kDistanceToPoint,  // ‖p_a − c‖ = length; c = point, or the image of point_site, or (0, 0)
    kDistance,         // ‖p_a − p_b‖ = length
    kOnLine,           // n·p_a = offset (n = normal, normalised)
    kFixedPoint,       // p_a = point (two scalar constraints)
  };
  Type type = Type::kDistanceToPoint;
  int a = 0, b = -1;
  std::optional<std::array<double, 2>> point;  // image coordinates; absent: measured or origin
  std::string point_site;                      // a world site whose image is the pivot
  std::array<double, 2> normal = {0.0, 1.0};
  std::optional<double> length;  // length or offset; absent: measured on the initial states
  /// The world position (m) of point_site, filled in by Environment when it loads the model.
  std::optional<std::array<double, 3>> point_world;
};

/// "distance_to_point" | "distance" | "on_line" | "fixed_point".
std::string ConstraintTypeName(ConstraintSpec::Type type);

struct SystemDescription {
  std::string name;  // [A-Za-z0-9_-]+, names data sets (<name>-<control>-…h5)
  /// The MJCF model (absolute once loaded: relative paths are taken from the file's folder).
  /// Empty for a system known only from video (keycld import): then every constraint gives its
  /// numbers, the initial-state ranges may be left out (nq = nv = 0), and nothing can be
  /// simulated or rendered (Environment throws InputError).
  std::filesystem::path mjcf;
  std::string camera = "fixed";             // the fixed camera that renders the frames
  std::vector<std::string> keypoint_sites;  // K sites, the point masses of the model
  std::vector<ConstraintSpec> constraints;
  std::vector<SampleRange> qpos_init;      // [nq] initial joint positions (rad or m)
  std::vector<SampleRange> qvel_init;      // [nv] initial joint velocities
  std::vector<SampleRange> action_ranges;  // [nu] constant action of a controlled run
  double zero_action_fraction = 0.2;       // share of controlled runs with all actions zero
  std::vector<int> under_zero;             // 0-based actuators held at zero in "under" data sets
  std::vector<GridAxis> grid;              // [nq] state grid for plots; empty: no grid
  /// Set when the description is one of the built-in systems (the file's name is theirs and
  /// it lives in the built-in folder); the control and diagnostics that know those systems use
  /// it.
  std::optional<EnvName> builtin;

  int num_keypoints() const { return static_cast<int>(keypoint_sites.size()); }
  int nq() const { return static_cast<int>(qpos_init.size()); }
  int nv() const { return static_cast<int>(qvel_init.size()); }
  int nu() const { return static_cast<int>(action_ranges.size()); }
  /// Whether every constraint has its numbers (no site, no length left to measure).
  bool Resolved() const;
  /// The constraint terms of a resolved description (a fixed point gives two terms; an
  /// axis-parallel line gives a fixed coordinate, so the built-in files give the terms of
  /// HolonomicConstraints::ForEnvironment exactly). Throws InputError when not Resolved().
  std::vector<ConstraintTerm> ConstraintTerms() const;
  /// Throws InputError unless `mode` exists for this system ("under" needs under_zero).
  void CheckControlMode(ControlMode mode) const;
};

/// Parses a description (TOML text; `origin` names it in errors, `base_dir` anchors a relative
/// mjcf path). Throws FormatError for a syntax error, a missing or unknown key, a wrong type, and
/// InputError for inconsistent values (a constraint naming keypoint 3 of 2, an empty range list,
/// hi < lo, a bad name). Every message names the origin and the key.
SystemDescription ParseSystem(const std::string& text, const std::string& origin,
                              const std::filesystem::path& base_dir);
/// Reads and parses a description file (IoError when it cannot be read).
SystemDescription LoadSystem(const std::filesystem::path& file);
/// The TOML text of a description (what data sets store, resolved, with an absolute mjcf);
/// ParseSystem(SystemToToml(d)) == d up to the builtin tag.
std::string SystemToToml(const SystemDescription& description);

/// Folder of the built-in descriptions: KEYCLD_SYSTEMS if set, else the source tree's
/// assets/systems.
std::filesystem::path BuiltinSystemsDir();
/// The built-in system `env` from <BuiltinSystemsDir()>/<name>.toml, its MJCF taken from
/// `assets_dir` when given, else from KEYCLD_ASSETS when set, else as the file says. Throws
/// InputError for kCustom.
SystemDescription BuiltinSystem(EnvName env, const std::filesystem::path& assets_dir = {});
/// A built-in name ("pendulum") or a description file path ("my_rig.toml"). InputError for a
/// name that is neither (no such file, no folder, no .toml), IoError for a missing .toml.
SystemDescription LoadSystemByName(const std::string& name_or_file);

}  // namespace keycld
