#include "keycld/train/checkpoint.h"

#include <map>

#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"
#include "keycld/util/text.h"

namespace keycld {

namespace {

torch::Tensor ToTensor(const std::vector<int64_t>& v) {
  return torch::tensor(v.empty() ? std::vector<int64_t>{} : v, torch::kInt64);
}

torch::Tensor StringTensor(const std::string& s) {
  auto t = torch::empty({int64_t(s.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

std::string TensorString(const torch::Tensor& t) {
  auto c = t.contiguous().to(torch::kUInt8);
  return std::string(reinterpret_cast<const char*>(c.data_ptr()), size_t(c.numel()));
}

void WriteSpec(torch::serialize::OutputArchive& a, const ModelSpec& s) {
  a.write("format", StringTensor(kCheckpointFormat));
  a.write("version", torch::tensor(kCheckpointVersion));
  a.write("env", StringTensor(EnvNameString(s.env)));
  a.write("model_kind", StringTensor(s.model));
  a.write("shape", ToTensor({s.num_keypoints, s.action_dim, s.hidden, s.image_size}));
  a.write("sigma_dt", torch::tensor({s.sigma, s.dt}, torch::kFloat64));
  if (s.env == EnvName::kCustom) {
    // A custom system's name and constraints: one row (kind, a, b, value, px, py) per term.
    a.write("system", StringTensor(s.system));
    torch::Tensor c = torch::zeros({int64_t(s.constraints.size()), 6}, torch::kFloat64);
    for (size_t i = 0; i < s.constraints.size(); ++i) {
      const ConstraintTerm& t = s.constraints[i];
      c[i] = torch::tensor({double(int(t.kind)), double(t.a), double(t.b), t.value, t.px, t.py},
                           torch::kFloat64);
    }
    a.write("constraints", c);
  }
}

torch::Tensor Read(torch::serialize::InputArchive& a, const char* key, const std::string& file) {
  torch::Tensor t;
  if (!a.try_read(key, t)) {
    throw FormatError("'" + file + "' is not a keycld checkpoint (no '" + key + "')");
  }
  return t;
}

ModelSpec ReadSpec(torch::serialize::InputArchive& a, const std::string& file) {
  if (TensorString(Read(a, "format", file)) != kCheckpointFormat) {
    throw FormatError("'" + file + "' is not a keycld checkpoint");
  }
  int64_t version = Read(a, "version", file).item<int64_t>();
  if (version < 1 || version > kCheckpointVersion) {
    throw FormatError("'" + file + "' has checkpoint version " + std::to_string(version) +
                      ", this keycld reads versions 1 to " + std::to_string(kCheckpointVersion));
  }
  ModelSpec s;
  try {
    s.env = ParseStoredEnvName(TensorString(Read(a, "env", file)));
    s.model = version == 1 ? ModelFromLegacyDynamics(TensorString(Read(a, "dynamics", file)))
                           : FindModelVariant(TensorString(Read(a, "model_kind", file))).name;
  } catch (const InputError& e) {
    throw FormatError("'" + file + "': " + e.what());
  }
  auto shape = Read(a, "shape", file);
  auto sd = Read(a, "sigma_dt", file);
  if (shape.numel() != 4 || sd.numel() != 2) throw FormatError("'" + file + "': bad model spec");
  s.num_keypoints = int(shape[0].item<int64_t>());
  s.action_dim = int(shape[1].item<int64_t>());
  s.hidden = int(shape[2].item<int64_t>());
  s.image_size = int(shape[3].item<int64_t>());
  s.sigma = sd[0].item<double>();
  s.dt = sd[1].item<double>();
  if (s.env == EnvName::kCustom) {
    s.system = TensorString(Read(a, "system", file));
    const torch::Tensor c = Read(a, "constraints", file).to(torch::kFloat64).contiguous();
    if (c.dim() != 2 || c.size(1) != 6) throw FormatError("'" + file + "': bad constraints");
    for (int64_t i = 0; i < c.size(0); ++i) {
      const int kind = int(c[i][0].item<double>());
      if (kind < 0 || kind > int(ConstraintTerm::Kind::kOnLine)) {
        throw FormatError("'" + file + "': unknown constraint kind " + std::to_string(kind));
      }
      ConstraintTerm t;
      t.kind = ConstraintTerm::Kind(kind);
      t.a = int(c[i][1].item<double>());
      t.b = int(c[i][2].item<double>());
      t.value = c[i][3].item<double>();
      t.px = c[i][4].item<double>();
      t.py = c[i][5].item<double>();
      s.constraints.push_back(t);
    }
  }
  try {
    s.Validate();
  } catch (const InputError& e) {
    throw FormatError("'" + file + "': " + e.what());
  }
  return s;
}

torch::serialize::InputArchive OpenArchive(const std::filesystem::path& file,
                                           const torch::Device& device) {
  if (!std::filesystem::exists(file))
    throw IoError("checkpoint not found: '" + file.string() + "'");
  torch::serialize::InputArchive a;
  try {
    a.load_from(file.string(), device);
  } catch (const c10::Error& e) {
    throw FormatError("'" + file.string() + "' is not a readable checkpoint (truncated or " +
                      "foreign file)");
  }
  return a;
}

}  // namespace

void SaveCheckpoint(const std::filesystem::path& file, Model& model,
                    torch::optim::Optimizer* optimizer, const TrainPosition& position) {
  torch::serialize::OutputArchive root;
  WriteSpec(root, model->spec());
  torch::serialize::OutputArchive m;
  model->save(m);
  root.write("model", m);
  if (optimizer) {
    torch::serialize::OutputArchive o;
    optimizer->save(o);
    root.write("optimizer", o);
  }
  root.write("position", ToTensor({position.step, position.epoch, position.step_in_epoch}));
  root.write("order", ToTensor(position.order));
  root.write("rng", StringTensor(position.rng_state));
  if (!position.config_toml.empty()) root.write("config", StringTensor(position.config_toml));
  // Serialized to memory first: LibTorch's archive writer aborts the process (it throws from a
  // destructor) when a write to a file fails, e.g. on a full disk.
  std::string bytes;
  try {
    root.save_to([&bytes](const void* data, size_t n) {
      bytes.append(static_cast<const char*>(data), n);
      return n;
    });
  } catch (const c10::Error& e) {
    throw IoError("cannot write checkpoint '" + file.string() +
                  "': " + std::string(e.what_without_backtrace()));
  }
  WriteFileAtomically(file, bytes);
}

ModelSpec ReadCheckpointSpec(const std::filesystem::path& file) {
  auto a = OpenArchive(file, torch::kCPU);
  return ReadSpec(a, file.string());
}

std::string ReadCheckpointConfig(const std::filesystem::path& file) {
  auto a = OpenArchive(file, torch::kCPU);
  ReadSpec(a, file.string());
  torch::Tensor t;
  return a.try_read("config", t) ? TensorString(t) : std::string();
}

// Loads the "model" archive into `model` and checks what LibTorch's loader does not: every
// parameter and buffer keeps the shape the spec gives it (the loader replaces a tensor by the
// stored one, whatever its shape) and holds finite values.
static void LoadParameters(torch::serialize::InputArchive& archive, Model& model,
                           const std::string& file) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const auto& p : model->named_parameters())
    shapes.emplace_back(p.key(), p.value().sizes().vec());
  for (const auto& b : model->named_buffers())
    shapes.emplace_back(b.key(), b.value().sizes().vec());
  model->load(archive);
  std::map<std::string, torch::Tensor> loaded;
  for (const auto& p : model->named_parameters()) loaded[p.key()] = p.value();
  for (const auto& b : model->named_buffers()) loaded[b.key()] = b.value();
  for (const auto& [name, shape] : shapes) {
    const torch::Tensor& t = loaded.at(name);
    if (t.sizes().vec() != shape) {
      throw FormatError("'" + file + "': parameter '" + name + "' has shape " + ShapeText(t) +
                        ", but the model it describes needs " + c10::str(c10::IntArrayRef(shape)));
    }
    if (t.is_floating_point() && !torch::isfinite(t).all().item<bool>()) {
      throw FormatError("'" + file + "': parameter '" + name + "' holds non-finite values");
    }
  }
}

Model LoadModel(const std::filesystem::path& file_or_run, const torch::Device& device) {
  const std::filesystem::path file = std::filesystem::is_directory(file_or_run)
                                         ? file_or_run / "checkpoints" / "last.pt"
                                         : file_or_run;
  auto a = OpenArchive(file, device);
  Model model = CreateModel(ReadSpec(a, file.string()));
  model->to(device);
  torch::serialize::InputArchive m;
  if (!a.try_read("model", m)) throw FormatError("'" + file.string() + "' holds no model");
  try {
    LoadParameters(m, model, file.string());
  } catch (const c10::Error& e) {
    throw FormatError("'" + file.string() + "': model parameters do not match its spec");
  }
  return model;
}

void LoadCheckpoint(const std::filesystem::path& file, Model& model,
                    torch::optim::Optimizer* optimizer, TrainPosition* position) {
  const torch::Device device = model->device();
  auto a = OpenArchive(file, device);
  ModelSpec s = ReadSpec(a, file.string());
  const ModelSpec& want = model->spec();
  if (s.env != want.env || s.SystemName() != want.SystemName() ||
      s.constraints != want.constraints || s.num_keypoints != want.num_keypoints ||
      s.action_dim != want.action_dim || s.hidden != want.hidden ||
      s.image_size != want.image_size || s.model != want.model) {
    throw FormatError("'" + file.string() + "' holds a model (" + DescribeModel(s) +
                      ") other than the one configured here (" + DescribeModel(want) + ")");
  }
  torch::serialize::InputArchive m;
  if (!a.try_read("model", m)) throw FormatError("'" + file.string() + "' holds no model");
  try {
    LoadParameters(m, model, file.string());
    if (optimizer) {
      torch::serialize::InputArchive o;
      if (!a.try_read("optimizer", o)) {
        throw FormatError("'" + file.string() + "' holds no optimizer state");
      }
      optimizer->load(o);
    }
  } catch (const c10::Error& e) {
    throw FormatError("'" + file.string() +
                      "' does not match the model: " + std::string(e.what_without_backtrace()));
  }
  if (position) {
    auto p = Read(a, "position", file.string());
    if (p.numel() != 3) throw FormatError("'" + file.string() + "': bad training position");
    position->step = p[0].item<int64_t>();
    position->epoch = p[1].item<int64_t>();
    position->step_in_epoch = p[2].item<int64_t>();
    auto order = Read(a, "order", file.string()).to(torch::kCPU).contiguous();
    position->order.assign(order.data_ptr<int64_t>(), order.data_ptr<int64_t>() + order.numel());
    position->rng_state = TensorString(Read(a, "rng", file.string()).to(torch::kCPU));
    torch::Tensor config;
    position->config_toml =
        a.try_read("config", config) ? TensorString(config.to(torch::kCPU)) : std::string();
  }
}

}  // namespace keycld
