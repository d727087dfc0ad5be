#include "keycld/sim/env_name.h"

#include "keycld/util/error.h"

namespace keycld {

EnvName ParseEnvName(const std::string& name) { return ParseName<EnvName>(name); }
ControlMode ParseControlMode(const std::string& name) { return ParseName<ControlMode>(name); }
EnvName ParseStoredEnvName(const std::string& name) {
  return name == "custom" ? EnvName::kCustom : ParseEnvName(name);
}
std::string EnvNameString(EnvName env) { return env == EnvName::kCustom ? "custom" : NameOf(env); }
std::string ControlModeString(ControlMode mode) { return NameOf(mode); }

void CheckControlMode(EnvName env, ControlMode mode) {
  if (env == EnvName::kPendulum && mode == ControlMode::kUnder) {
    throw InputError(
        "control mode 'under' does not exist for the pendulum: it has one actuator "
        "(use none or full)");
  }
}

int JointCount(EnvName env) {
  if (env == EnvName::kCustom) {
    throw InputError("JointCount: a custom system's joints come from its description");
  }
  return env == EnvName::kPendulum ? 1 : 2;
}

}  // namespace keycld
