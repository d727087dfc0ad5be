#include "keycld/sim/env_name.h"

#include "keycld/util/error.h"

namespace keycld {

EnvName ParseEnvName(const std::string& name) { return ParseName<EnvName>(name); }
ControlMode ParseControlMode(const std::string& name) { return ParseName<ControlMode>(name); }
std::string EnvNameString(EnvName env) { return NameOf(env); }
std::string ControlModeString(ControlMode mode) { return NameOf(mode); }

void CheckControlMode(EnvName env, ControlMode mode) {
  if (env == EnvName::kPendulum && mode == ControlMode::kUnder) {
    throw InputError(
        "control mode 'under' does not exist for the pendulum: it has one actuator "
        "(use none or full)");
  }
}

int JointCount(EnvName env) { return env == EnvName::kPendulum ? 1 : 2; }

}  // namespace keycld
