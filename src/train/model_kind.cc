#include "keycld/train/model_kind.h"

#include "keycld/util/error.h"

namespace keycld {

ModelKind ParseModelKind(const std::string& name) {
  for (ModelKind kind : kAllModelKinds) {
    if (name == ModelKindName(kind)) return kind;
  }
  throw InputError("unknown model '" + name + "' (expected keycld, keycld-nc or node2)");
}

std::string ModelKindName(ModelKind kind) {
  switch (kind) {
    case ModelKind::kKeycld:
      return "keycld";
    case ModelKind::kKeycldNc:
      return "keycld-nc";
    case ModelKind::kNode2:
      return "node2";
  }
  return "?";
}

ModelKind ModelKindFromLegacyDynamics(const std::string& dynamics) {
  if (dynamics == "constrained") return ModelKind::kKeycld;
  if (dynamics == "unconstrained") return ModelKind::kKeycldNc;
  throw InputError("unknown dynamics '" + dynamics +
                   "' (expected constrained or unconstrained; newer files say model = keycld, "
                   "keycld-nc or node2)");
}

}  // namespace keycld
