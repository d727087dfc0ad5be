#include "keycld/sim/system.h"

#include <toml++/toml.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "keycld/util/error.h"

namespace keycld {

namespace fs = std::filesystem;

std::string ConstraintTypeName(ConstraintSpec::Type type) {
  switch (type) {
    case ConstraintSpec::Type::kDistanceToPoint:
      return "distance_to_point";
    case ConstraintSpec::Type::kDistance:
      return "distance";
    case ConstraintSpec::Type::kOnLine:
      return "on_line";
    case ConstraintSpec::Type::kFixedPoint:
      return "fixed_point";
  }
  return "?";
}

bool SystemDescription::Resolved() const {
  for (const ConstraintSpec& c : constraints) {
    if (!c.length && c.type != ConstraintSpec::Type::kFixedPoint) return false;
    if (!c.point_site.empty()) return false;
    if (c.type == ConstraintSpec::Type::kFixedPoint && !c.point) return false;
  }
  return true;
}

std::vector<ConstraintTerm> SystemDescription::ConstraintTerms() const {
  if (!Resolved()) {
    throw InputError("system '" + name +
                     "': its constraints are not resolved yet (a site or a length to measure; "
                     "Environment resolves them from the MJCF model)");
  }
  std::vector<ConstraintTerm> terms;
  for (const ConstraintSpec& c : constraints) {
    switch (c.type) {
      case ConstraintSpec::Type::kDistanceToPoint: {
        const auto p = c.point.value_or(std::array<double, 2>{0.0, 0.0});
        terms.push_back(p[0] == 0.0 && p[1] == 0.0
                            ? ConstraintTerm::FixedDistanceToOrigin(c.a, *c.length)
                            : ConstraintTerm::FixedDistanceToPoint(c.a, p[0], p[1], *c.length));
        break;
      }
      case ConstraintSpec::Type::kDistance:
        terms.push_back(ConstraintTerm::FixedDistance(c.a, c.b, *c.length));
        break;
      case ConstraintSpec::Type::kOnLine: {
        const double nx = c.normal[0], ny = c.normal[1];
        // An axis-parallel rail is a fixed coordinate (the same Φ, D and h, one multiply less).
        if (nx == 0.0 && std::abs(ny) == 1.0) {
          terms.push_back(ConstraintTerm::FixedCoordinate(2 * c.a + 1, ny * *c.length));
        } else if (ny == 0.0 && std::abs(nx) == 1.0) {
          terms.push_back(ConstraintTerm::FixedCoordinate(2 * c.a, nx * *c.length));
        } else {
          terms.push_back(ConstraintTerm::OnLine(c.a, nx, ny, *c.length));
        }
        break;
      }
      case ConstraintSpec::Type::kFixedPoint:
        terms.push_back(ConstraintTerm::FixedCoordinate(2 * c.a, (*c.point)[0]));
        terms.push_back(ConstraintTerm::FixedCoordinate(2 * c.a + 1, (*c.point)[1]));
        break;
    }
  }
  return terms;
}

void SystemDescription::CheckControlMode(ControlMode mode) const {
  if (mode == ControlMode::kUnder && under_zero.empty()) {
    throw InputError("control mode 'under' does not exist for the " + name +
                     (nu() == 1 ? ": it has one actuator (use none or full)"
                                : ": its description names no actuator to hold at zero "
                                  "([actions] under_zero)"));
  }
}

namespace {

// Reading one description file: every error names the origin and the key.
class Reader {
 public:
  Reader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void Fail(const std::string& key, const std::string& what) const {
    throw FormatError(origin_ + ": " + key + ": " + what);
  }
  [[noreturn]] void Invalid(const std::string& key, const std::string& what) const {
    throw InputError(origin_ + ": " + key + ": " + what);
  }

  void CheckKeys(const toml::table& t, const std::string& where,
                 const std::set<std::string>& known) const {
    for (const auto& [k, v] : t) {
      if (!known.count(std::string(k.str()))) {
        std::string list;
        for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
        Fail(where.empty() ? std::string(k.str()) : where + "." + std::string(k.str()),
             "unknown key (expected one of " + list + ")");
      }
    }
  }

  double Number(const toml::node& n, const std::string& key) const {
    if (auto v = n.value<double>(); v && (n.is_floating_point() || n.is_integer())) {
      if (!std::isfinite(*v)) Invalid(key, "must be finite");
      return *v;
    }
    Fail(key, "expected a number");
  }
  std::string String(const toml::node& n, const std::string& key) const {
    if (auto v = n.value<std::string>(); v && n.is_string()) return *v;
    Fail(key, "expected a string");
  }
  int Integer(const toml::node& n, const std::string& key) const {
    if (auto v = n.value<int64_t>(); v && n.is_integer()) {
      if (*v < -1000000 || *v > 1000000) Invalid(key, "out of range");
      return int(*v);
    }
    Fail(key, "expected an integer");
  }
  const toml::array& Array(const toml::node& n, const std::string& key) const {
    if (const toml::array* a = n.as_array()) return *a;
    Fail(key, "expected an array");
  }
  std::array<double, 2> Pair(const toml::node& n, const std::string& key) const {
    const toml::array& a = Array(n, key);
    if (a.size() != 2) Fail(key, "expected two numbers [x, y]");
    return {Number(*a.get(0), key), Number(*a.get(1), key)};
  }
  std::vector<SampleRange> Ranges(const toml::node& n, const std::string& key) const {
    std::vector<SampleRange> out;
    const toml::array& a = Array(n, key);
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string k = key + "[" + std::to_string(i) + "]";
      auto p = Pair(*a.get(i), k);
      if (p[1] < p[0]) Invalid(k, "hi < lo");
      out.push_back({p[0], p[1]});
    }
    return out;
  }
  // A 1-based keypoint index of the file → 0-based.
  int Keypoint(const toml::node& n, const std::string& key, int count) const {
    int k = Integer(n, key);
    if (k < 1 || k > count) {
      Invalid(key, "keypoint " + std::to_string(k) + " does not exist (the system has " +
                       std::to_string(count) + " keypoint(s), numbered from 1)");
    }
    return k - 1;
  }

 private:
  std::string origin_;
};

// The shortest text that reads back as the same double.
std::string Number(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string t(buf, r.ptr);
  if (t.find_first_of(".eEn") == std::string::npos) t += ".0";
  return t;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

SystemDescription ParseSystem(const std::string& text, const std::string& origin,
                              const fs::path& base_dir) {
  toml::table t;
  try {
    t = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << origin << ":" << e.source().begin.line << ": " << e.description();
    throw FormatError(msg.str());
  }
  Reader r(origin);
  r.CheckKeys(t, "",
              {"name", "mjcf", "camera", "keypoints", "constraints", "initial_state", "actions",
               "state_grid"});
  SystemDescription d;
  auto need = [&](const char* key) -> const toml::node& {
    const toml::node* n = t.get(key);
    if (!n) r.Fail(key, "missing");
    return *n;
  };
  d.name = r.String(need("name"), "name");
  if (d.name.empty() || d.name.size() > 64 ||
      d.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") !=
          std::string::npos) {
    r.Invalid("name", "'" + d.name + "' (expected 1 to 64 letters, digits or _)");
  }
  // Without an MJCF model the system can only be imported from video (keycld import).
  if (const toml::node* m = t.get("mjcf")) {
    fs::path mjcf = r.String(*m, "mjcf");
    if (mjcf.empty()) r.Invalid("mjcf", "empty path");
    d.mjcf = mjcf.is_absolute() ? mjcf : fs::absolute(base_dir / mjcf).lexically_normal();
  }
  if (const toml::node* n = t.get("camera")) d.camera = r.String(*n, "camera");
  const toml::array& kp = r.Array(need("keypoints"), "keypoints");
  if (kp.empty()) r.Invalid("keypoints", "at least one keypoint site is needed");
  for (size_t i = 0; i < kp.size(); ++i) {
    d.keypoint_sites.push_back(r.String(*kp.get(i), "keypoints[" + std::to_string(i) + "]"));
  }
  const int K = d.num_keypoints();
  if (const toml::node* n = t.get("constraints")) {
    const toml::array& cs = r.Array(*n, "constraints");
    for (size_t i = 0; i < cs.size(); ++i) {
      const std::string where = "constraints[" + std::to_string(i) + "]";
      const toml::table* ct = cs.get(i)->as_table();
      if (!ct) r.Fail(where, "expected a table ([[constraints]])");
      r.CheckKeys(
          *ct, where,
          {"type", "keypoint", "keypoints", "point", "point_site", "length", "normal", "offset"});
      const toml::node* type = ct->get("type");
      if (!type) r.Fail(where + ".type", "missing");
      const std::string ts = r.String(*type, where + ".type");
      ConstraintSpec c;
      std::set<std::string> allowed;
      if (ts == "distance_to_point") {
        c.type = ConstraintSpec::Type::kDistanceToPoint;
        allowed = {"type", "keypoint", "point", "point_site", "length"};
      } else if (ts == "distance") {
        c.type = ConstraintSpec::Type::kDistance;
        allowed = {"type", "keypoints", "length"};
      } else if (ts == "on_line") {
        c.type = ConstraintSpec::Type::kOnLine;
        allowed = {"type", "keypoint", "normal", "offset"};
      } else if (ts == "fixed_point") {
        c.type = ConstraintSpec::Type::kFixedPoint;
        allowed = {"type", "keypoint", "point"};
      } else {
        r.Invalid(where + ".type", "unknown constraint type '" + ts +
                                       "' (expected distance_to_point, distance, on_line or "
                                       "fixed_point)");
      }
      for (const auto& [k, v] : *ct) {
        if (!allowed.count(std::string(k.str()))) {
          r.Fail(where + "." + std::string(k.str()), "not a key of a " + ts + " constraint");
        }
      }
      if (c.type == ConstraintSpec::Type::kDistance) {
        const toml::node* ks = ct->get("keypoints");
        if (!ks) r.Fail(where + ".keypoints", "missing (two keypoints [a, b])");
        const toml::array& a = r.Array(*ks, where + ".keypoints");
        if (a.size() != 2) r.Fail(where + ".keypoints", "expected two keypoints [a, b]");
        c.a = r.Keypoint(*a.get(0), where + ".keypoints", K);
        c.b = r.Keypoint(*a.get(1), where + ".keypoints", K);
        if (c.a == c.b) r.Invalid(where + ".keypoints", "the two keypoints must differ");
      } else {
        const toml::node* k = ct->get("keypoint");
        if (!k) r.Fail(where + ".keypoint", "missing");
        c.a = r.Keypoint(*k, where + ".keypoint", K);
      }
      if (const toml::node* p = ct->get("point")) c.point = r.Pair(*p, where + ".point");
      if (const toml::node* p = ct->get("point_site")) {
        c.point_site = r.String(*p, where + ".point_site");
        if (c.point) r.Invalid(where, "give point or point_site, not both");
      }
      if (const toml::node* l = ct->get("length")) {
        c.length = r.Number(*l, where + ".length");
        if (!(*c.length > 0)) r.Invalid(where + ".length", "must be > 0");
      }
      if (const toml::node* o = ct->get("offset")) c.length = r.Number(*o, where + ".offset");
      if (c.type == ConstraintSpec::Type::kOnLine) {
        const toml::node* nn = ct->get("normal");
        if (!nn) r.Fail(where + ".normal", "missing (the line's normal [nx, ny])");
        c.normal = r.Pair(*nn, where + ".normal");
        const double norm = std::hypot(c.normal[0], c.normal[1]);
        if (!(norm > 0)) r.Invalid(where + ".normal", "must not be zero");
        if (std::abs(norm - 1.0) > 1e-12) c.normal = {c.normal[0] / norm, c.normal[1] / norm};
      }
      d.constraints.push_back(c);
    }
  }
  if (d.mjcf.empty()) {
    // Nothing can be measured or simulated: every constraint must carry its numbers.
    for (size_t i = 0; i < d.constraints.size(); ++i) {
      const ConstraintSpec& c = d.constraints[i];
      const std::string where = "constraints[" + std::to_string(i) + "]";
      if (!c.point_site.empty()) {
        r.Invalid(where + ".point_site", "needs an mjcf model; give point = [x, y] instead");
      }
      if ((!c.length && c.type != ConstraintSpec::Type::kFixedPoint) ||
          (c.type == ConstraintSpec::Type::kFixedPoint && !c.point)) {
        r.Invalid(where, std::string("without an mjcf model nothing can be measured: give its ") +
                             (c.type == ConstraintSpec::Type::kOnLine       ? "offset"
                              : c.type == ConstraintSpec::Type::kFixedPoint ? "point"
                                                                            : "length"));
      }
    }
    if (t.get("state_grid")) r.Invalid("state_grid", "needs an mjcf model to render it");
  }
  // Initial states (optional without a model: nothing is simulated) and actions.
  if (!d.mjcf.empty() || t.get("initial_state")) {
    const toml::node& n = need("initial_state");
    const toml::table* it = n.as_table();
    if (!it) r.Fail("initial_state", "expected a table");
    r.CheckKeys(*it, "initial_state", {"qpos", "qvel"});
    if (!it->get("qpos")) r.Fail("initial_state.qpos", "missing");
    if (!it->get("qvel")) r.Fail("initial_state.qvel", "missing");
    d.qpos_init = r.Ranges(*it->get("qpos"), "initial_state.qpos");
    d.qvel_init = r.Ranges(*it->get("qvel"), "initial_state.qvel");
    if (d.qpos_init.empty()) r.Invalid("initial_state.qpos", "one [lo, hi] per joint is needed");
  }
  {
    const toml::node& n = need("actions");
    const toml::table* at = n.as_table();
    if (!at) r.Fail("actions", "expected a table");
    r.CheckKeys(*at, "actions", {"range", "zero_fraction", "under_zero"});
    if (!at->get("range")) r.Fail("actions.range", "missing (one [lo, hi] per actuator)");
    d.action_ranges = r.Ranges(*at->get("range"), "actions.range");
    if (d.action_ranges.empty()) r.Invalid("actions.range", "at least one actuator is needed");
    if (const toml::node* z = at->get("zero_fraction")) {
      d.zero_action_fraction = r.Number(*z, "actions.zero_fraction");
      if (d.zero_action_fraction < 0 || d.zero_action_fraction > 1) {
        r.Invalid("actions.zero_fraction", "must be in [0, 1]");
      }
    }
    if (const toml::node* u = at->get("under_zero")) {
      const toml::array& a = r.Array(*u, "actions.under_zero");
      for (size_t i = 0; i < a.size(); ++i) {
        int k = r.Integer(*a.get(i), "actions.under_zero");
        if (k < 1 || k > d.nu()) {
          r.Invalid("actions.under_zero", "actuator " + std::to_string(k) +
                                              " does not exist (the system has " +
                                              std::to_string(d.nu()) + ", numbered from 1)");
        }
        d.under_zero.push_back(k - 1);
      }
      if (int(d.under_zero.size()) >= d.nu()) {
        r.Invalid("actions.under_zero", "would hold every actuator at zero");
      }
    }
  }
  if (const toml::node* g = t.get("state_grid")) {
    const toml::table* gt = g->as_table();
    if (!gt) r.Fail("state_grid", "expected a table");
    r.CheckKeys(*gt, "state_grid", {"qpos"});
    if (!gt->get("qpos")) r.Fail("state_grid.qpos", "missing");
    const toml::array& a = r.Array(*gt->get("qpos"), "state_grid.qpos");
    long total = 1;
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string k = "state_grid.qpos[" + std::to_string(i) + "]";
      const toml::array& e = r.Array(*a.get(i), k);
      if (e.size() != 3) r.Fail(k, "expected [lo, hi, count]");
      GridAxis axis{r.Number(*e.get(0), k), r.Number(*e.get(1), k), r.Integer(*e.get(2), k)};
      if (axis.count < 1 || axis.hi < axis.lo) r.Invalid(k, "needs count >= 1 and hi >= lo");
      total *= axis.count;
      d.grid.push_back(axis);
    }
    if (int(d.grid.size()) != d.nq()) {
      r.Invalid("state_grid.qpos", "has " + std::to_string(d.grid.size()) +
                                       " axes but initial_state.qpos has " +
                                       std::to_string(d.nq()) + " joints");
    }
    if (total > 4096) r.Invalid("state_grid.qpos", "more than 4096 grid states");
  }
  return d;
}

SystemDescription LoadSystem(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) {
    throw IoError("system description '" + file.string() + "' is not a readable file");
  }
  std::ifstream in(file);
  std::stringstream ss;
  if (!(ss << in.rdbuf())) throw IoError("cannot read system description '" + file.string() + "'");
  SystemDescription d = ParseSystem(ss.str(), file.string(), fs::absolute(file).parent_path());
  for (const auto& [value, name] : NameTable<EnvName>::kEntries) {
    if (d.name == name) {
      throw InputError(file.string() + ": name '" + d.name +
                       "' is a built-in system's; give your system another name");
    }
  }
  return d;
}

std::string SystemToToml(const SystemDescription& d) {
  std::ostringstream o;
  auto ranges = [&](const std::vector<SampleRange>& rs) {
    std::string s = "[";
    for (size_t i = 0; i < rs.size(); ++i) {
      s += (i ? ", [" : "[") + Number(rs[i].lo) + ", " + Number(rs[i].hi) + "]";
    }
    return s + "]";
  };
  o << "name = " << Quote(d.name) << "\n";
  if (!d.mjcf.empty()) o << "mjcf = " << Quote(d.mjcf.string()) << "\n";
  o << "camera = " << Quote(d.camera) << "\n";
  o << "keypoints = [";
  for (size_t i = 0; i < d.keypoint_sites.size(); ++i) {
    o << (i ? ", " : "") << Quote(d.keypoint_sites[i]);
  }
  o << "]\n";
  for (const ConstraintSpec& c : d.constraints) {
    o << "\n[[constraints]]\ntype = " << Quote(ConstraintTypeName(c.type)) << "\n";
    if (c.type == ConstraintSpec::Type::kDistance) {
      o << "keypoints = [" << c.a + 1 << ", " << c.b + 1 << "]\n";
    } else {
      o << "keypoint = " << c.a + 1 << "\n";
    }
    if (c.point)
      o << "point = [" << Number((*c.point)[0]) << ", " << Number((*c.point)[1]) << "]\n";
    if (!c.point_site.empty()) o << "point_site = " << Quote(c.point_site) << "\n";
    if (c.type == ConstraintSpec::Type::kOnLine) {
      o << "normal = [" << Number(c.normal[0]) << ", " << Number(c.normal[1]) << "]\n";
      if (c.length) o << "offset = " << Number(*c.length) << "\n";
    } else if (c.length && c.type != ConstraintSpec::Type::kFixedPoint) {
      o << "length = " << Number(*c.length) << "\n";
    }
  }
  if (!d.qpos_init.empty()) {
    o << "\n[initial_state]\nqpos = " << ranges(d.qpos_init) << "\nqvel = " << ranges(d.qvel_init)
      << "\n";
  }
  o << "\n[actions]\nrange = " << ranges(d.action_ranges)
    << "\nzero_fraction = " << Number(d.zero_action_fraction) << "\nunder_zero = [";
  for (size_t i = 0; i < d.under_zero.size(); ++i) o << (i ? ", " : "") << d.under_zero[i] + 1;
  o << "]\n";
  if (!d.grid.empty()) {
    o << "\n[state_grid]\nqpos = [";
    for (size_t i = 0; i < d.grid.size(); ++i) {
      o << (i ? ", [" : "[") << Number(d.grid[i].lo) << ", " << Number(d.grid[i].hi) << ", "
        << d.grid[i].count << "]";
    }
    o << "]\n";
  }
  return o.str();
}

fs::path BuiltinSystemsDir() {
  if (const char* env = std::getenv("KEYCLD_SYSTEMS"); env && *env) return fs::path(env);
  return fs::path(KEYCLD_SOURCE_ASSETS_DIR) / "systems";
}

SystemDescription BuiltinSystem(EnvName env, const fs::path& assets_dir) {
  if (env == EnvName::kCustom) {
    throw InputError("BuiltinSystem: a custom system has no built-in description");
  }
  const std::string name = EnvNameString(env);
  const fs::path file = BuiltinSystemsDir() / (name + ".toml");
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) {
    throw IoError("built-in system description not found: '" + file.string() +
                  "' (set KEYCLD_SYSTEMS to the folder holding " + name + ".toml)");
  }
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  SystemDescription d = ParseSystem(ss.str(), file.string(), file.parent_path());
  if (d.name != name) {
    throw FormatError(file.string() + ": name '" + d.name + "' (expected '" + name + "')");
  }
  if (!assets_dir.empty()) {
    d.mjcf = assets_dir / d.mjcf.filename();
  } else if (const char* dir = std::getenv("KEYCLD_ASSETS"); dir && *dir) {
    d.mjcf = fs::path(dir) / d.mjcf.filename();
  }
  d.builtin = env;
  return d;
}

SystemDescription LoadSystemByName(const std::string& name_or_file) {
  for (const auto& [value, name] : NameTable<EnvName>::kEntries) {
    if (name_or_file == name) return BuiltinSystem(value);
  }
  std::error_code ec;
  const fs::path file(name_or_file);
  if (!fs::exists(file, ec) && !file.has_parent_path() && file.extension() != ".toml") {
    throw InputError("unknown system '" + name_or_file + "' (expected " +
                     JoinAlternatives(Names<EnvName>()) + ", or a description file .toml)");
  }
  return LoadSystem(file);
}

}  // namespace keycld
