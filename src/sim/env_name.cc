#include "keycld/sim/env_name.h"

#include "keycld/util/error.h"

namespace keycld {

EnvName ParseEnvName(const std::string& name) {
  if (name == "pendulum") return EnvName::kPendulum;
  if (name == "cartpole") return EnvName::kCartpole;
  if (name == "acrobot") return EnvName::kAcrobot;
  throw InputError("unknown environment '" + name + "' (expected pendulum, cartpole or acrobot)");
}

ControlMode ParseControlMode(const std::string& name) {
  if (name == "none") return ControlMode::kNone;
  if (name == "under") return ControlMode::kUnder;
  if (name == "full") return ControlMode::kFull;
  throw InputError("unknown control mode '" + name + "' (expected none, under or full)");
}

std::string EnvNameString(EnvName env) {
  switch (env) {
    case EnvName::kPendulum:
      return "pendulum";
    case EnvName::kCartpole:
      return "cartpole";
    case EnvName::kAcrobot:
      return "acrobot";
  }
  return "?";
}

std::string ControlModeString(ControlMode mode) {
  switch (mode) {
    case ControlMode::kNone:
      return "none";
    case ControlMode::kUnder:
      return "under";
    case ControlMode::kFull:
      return "full";
  }
  return "?";
}

void CheckControlMode(EnvName env, ControlMode mode) {
  if (env == EnvName::kPendulum && mode == ControlMode::kUnder) {
    throw InputError(
        "control mode 'under' does not exist for the pendulum: it has one actuator "
        "(use none or full)");
  }
}

}  // namespace keycld
