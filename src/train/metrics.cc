#include "keycld/train/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"

namespace keycld {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json ToJson(const StepRecord& r) {
  json j = {{"type", "step"},      {"step", r.step},
            {"epoch", r.epoch},    {"loss", r.loss},
            {"rec", r.rec},        {"dyn", r.dyn},
            {"bce", r.bce},        {"lr", r.lr},
            {"dynamics_lr", r.dynamics_lr},
            {"w_dyn", r.w_dyn},    {"integrator", r.integrator},
            {"horizon", r.horizon}, {"seconds", r.seconds}};
  if (r.kl) j["kl"] = *r.kl;
  if (r.con) j["con"] = *r.con;
  return j;
}

json ToJson(const EpochRecord& r) {
  json j = {{"type", "epoch"}, {"epoch", r.epoch}, {"step", r.step}, {"seconds", r.seconds}};
  if (r.vpt_mean) {
    j["val_vpt_mean"] = *r.vpt_mean;
    j["val_vpt_std"] = r.vpt_std.value_or(0.0);
    j["val_vpt_median"] = r.vpt_median.value_or(0.0);
    j["val_runs"] = r.val_runs;
    j["dopri5_steps"] = r.dopri5_steps;
  }
  if (!r.val_error.empty()) j["val_error"] = r.val_error;
  if (r.constraint_spread) j["constraint_spread"] = *r.constraint_spread;
  if (r.best_constraint_spread) j["best_constraint_spread"] = *r.best_constraint_spread;
  if (!r.relabelled.empty()) j["relabelled"] = r.relabelled;
  return j;
}

}  // namespace

MetricsHistory ReadMetrics(const fs::path& file) {
  MetricsHistory h;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("type")) continue;
    try {
      if (j["type"] == "step") {
        StepRecord r;
        r.step = j.value("step", int64_t(0));
        r.epoch = j.value("epoch", int64_t(0));
        r.loss = j.value("loss", 0.0);
        r.rec = j.value("rec", 0.0);
        r.dyn = j.value("dyn", 0.0);
        r.bce = j.value("bce", 0.0);
        if (j.contains("kl")) r.kl = j.value("kl", 0.0);
        if (j.contains("con")) r.con = j.value("con", 0.0);
        r.lr = j.value("lr", 0.0);
        r.dynamics_lr = j.value("dynamics_lr", 0.0);
        r.w_dyn = j.value("w_dyn", 0.0);
        r.horizon = j.value("horizon", int64_t(0));
        r.integrator = j.value("integrator", std::string("euler"));
        r.seconds = j.value("seconds", 0.0);
        h.steps.push_back(r);
      } else if (j["type"] == "epoch") {
        EpochRecord r;
        r.epoch = j.value("epoch", int64_t(0));
        r.step = j.value("step", int64_t(0));
        r.seconds = j.value("seconds", 0.0);
        if (j.contains("val_vpt_mean")) {
          r.vpt_mean = j.value("val_vpt_mean", 0.0);
          r.vpt_std = j.value("val_vpt_std", 0.0);
          r.vpt_median = j.value("val_vpt_median", 0.0);
          r.val_runs = j.value("val_runs", int64_t(0));
          r.dopri5_steps = j.value("dopri5_steps", int64_t(0));
        }
        r.val_error = j.value("val_error", std::string());
        if (j.contains("constraint_spread")) r.constraint_spread = j.value("constraint_spread", 0.0);
        if (j.contains("best_constraint_spread")) {
          r.best_constraint_spread = j.value("best_constraint_spread", 0.0);
        }
        r.relabelled = j.value("relabelled", std::vector<int64_t>());
        h.epochs.push_back(r);
      }
    } catch (const json::exception&) {
      // A record with a field of the wrong type: skipped like an unparsable line.
    }
  }
  return h;
}

MetricsWriter::MetricsWriter(const fs::path& file, int64_t keep_before_step) : file_(file) {
  std::string kept;
  if (keep_before_step >= 0 && fs::exists(file)) {
    // Keep the lines in their order; records after the resume point (and broken lines) go.
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
      if (j["step"].get<int64_t>() <= keep_before_step) kept += line + "\n";
    }
  }
  WriteTextAtomically(file, kept);
  fd_ = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) throw IoError("cannot append to '" + file.string() + "': " + std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (fd_ < 0) return;
  // Best effort while unwinding: records after the last checkpoint are dropped by a resume.
  if (!pending_.empty()) (void)WriteAll(fd_, pending_);
  ::close(fd_);
}

void MetricsWriter::Append(const StepRecord& r) {
  pending_ += ToJson(r).dump() + "\n";
  if (pending_.size() >= kFlushBytes) Flush();
}

void MetricsWriter::Append(const EpochRecord& r) {
  pending_ += ToJson(r).dump() + "\n";
  if (pending_.size() >= kFlushBytes) Flush();
}

void MetricsWriter::Flush() {
  const int err = WriteAll(fd_, pending_);
  pending_.clear();
  if (err != 0) throw IoError(WriteFailure(file_, err));
}

double TrainingSeconds(const MetricsHistory& history, int64_t epochs) {
  double total = 0;
  for (const StepRecord& r : history.steps) {
    if (epochs <= 0 || r.epoch <= epochs) total += r.seconds;
  }
  return total;
}

}  // namespace keycld
