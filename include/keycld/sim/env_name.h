// Names of the benchmark systems and their actuation (docs/method.md §7); no MuJoCo needed.
#pragma once

#include <string>

#include "keycld/util/names.h"

namespace keycld {

/// The built-in systems, and kCustom for a system of the user's own (a description file,
/// sim/system.h, docs/systems.md). Names and CLI choices list the built-ins only.
enum class EnvName { kPendulum, kCartpole, kAcrobot, kCustom };
/// Actuation of a data set (docs/method.md §7): none, under (second actuator zero), full.
enum class ControlMode { kNone, kUnder, kFull };

template <>
struct NameTable<EnvName> {
  static constexpr const char* kWhat = "environment";
  static constexpr std::pair<EnvName, const char*> kEntries[] = {{EnvName::kPendulum, "pendulum"},
                                                                 {EnvName::kCartpole, "cartpole"},
                                                                 {EnvName::kAcrobot, "acrobot"}};
};
template <>
struct NameTable<ControlMode> {
  static constexpr const char* kWhat = "control mode";
  static constexpr std::pair<ControlMode, const char*> kEntries[] = {
      {ControlMode::kNone, "none"}, {ControlMode::kUnder, "under"}, {ControlMode::kFull, "full"}};
};

/// Parse "pendulum|cartpole|acrobot" / "none|under|full"; InputError otherwise.
EnvName ParseEnvName(const std::string& name);
/// ParseEnvName, and "custom" → kCustom: the `env` field of data sets and checkpoints.
EnvName ParseStoredEnvName(const std::string& name);
ControlMode ParseControlMode(const std::string& name);
/// "pendulum" | "cartpole" | "acrobot" | "custom".
std::string EnvNameString(EnvName env);
std::string ControlModeString(ControlMode mode);
/// Joints of the system's MJCF model (docs/method.md §7): nq = nv = nu = 1 for the pendulum, 2 for
/// the cartpole and the acrobot (every joint has a motor). InputError for kCustom (its
/// description says).
int JointCount(EnvName env);
/// Throws InputError for a combination the benchmark lacks (pendulum has no "under"); a custom
/// system's description checks its own (SystemDescription::CheckControlMode).
void CheckControlMode(EnvName env, ControlMode mode);

}  // namespace keycld
