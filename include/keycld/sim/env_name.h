// Names of the benchmark systems and their actuation (KEYCLD.md §7); no MuJoCo needed.
#pragma once

#include <string>

namespace keycld {

enum class EnvName { kPendulum, kCartpole, kAcrobot };
/// Actuation of a data set (KEYCLD.md §7): none, under (second actuator zero), full.
enum class ControlMode { kNone, kUnder, kFull };

/// Parse "pendulum|cartpole|acrobot" / "none|under|full"; InputError otherwise.
EnvName ParseEnvName(const std::string& name);
ControlMode ParseControlMode(const std::string& name);
std::string EnvNameString(EnvName env);
std::string ControlModeString(ControlMode mode);
/// Throws InputError for a combination the benchmark lacks (pendulum has no "under").
void CheckControlMode(EnvName env, ControlMode mode);

}  // namespace keycld
