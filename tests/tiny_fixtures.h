// Small models and data sets shared by the training, variant and control tests.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "keycld/data/generate.h"
#include "keycld/models/registry.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/trainer.h"

namespace keycld::testing {

/// A 16×16, h = 8 model of `env`, every actuator modelled (pendulum 1, cartpole/acrobot 2),
/// Δt of the environment's frames.
inline ModelSpec TinyModelSpec(EnvName env, std::string kind = "keycld") {
  ModelSpec s;
  s.env = env;
  s.num_keypoints = KeypointCount(env);
  s.action_dim = env == EnvName::kPendulum ? 1 : 2;
  s.hidden = 8;
  s.image_size = 16;
  s.dt = env == EnvName::kPendulum ? 0.02 : 0.01;
  s.model = kind;
  return s;
}

/// A tiny data set of `env`: 6 runs (5 train, 1 validation) of 10 frames, seed 3.
inline std::filesystem::path TinyData(const std::filesystem::path& dir, EnvName env, int size = 16,
                                      ControlMode control = ControlMode::kNone) {
  GenerateOptions o;
  o.env = env;
  o.control = control;
  o.runs = 6;
  o.frames = 10;
  o.size = size;
  o.seed = 3;
  o.out_dir = dir;
  o.progress = false;
  return GenerateDataset(o).path;
}

/// A tiny pendulum data set (TinyData).
inline std::filesystem::path TinyPendulumData(const std::filesystem::path& dir, int size = 16,
                                              ControlMode control = ControlMode::kNone) {
  return TinyData(dir, EnvName::kPendulum, size, control);
}

/// Training options for a tiny run: h = 8, 2 epochs, 2 threads, one validation run at loose
/// tolerances, no progress bar or per-epoch lines.
inline TrainOptions TinyTrainOptions(const std::filesystem::path& data,
                                     const std::filesystem::path& run) {
  TrainOptions t;
  t.config.data = data;
  t.config.hidden = 8;
  t.config.epochs = 2;
  t.config.threads = 2;
  t.config.val_runs = 1;
  t.config.rtol = t.config.atol = 1e-6;
  t.run_dir = run;
  t.progress = false;
  t.quiet = true;
  return t;
}

/// TinyTrainOptions for a baseline (lag-vae, lag-cavae, hgn): no augmentation, Adam at 1e-3 for
/// every parameter, as their presets.
inline TrainOptions BaselineTrainOptions(const std::filesystem::path& data,
                                         const std::filesystem::path& run,
                                         const std::string& kind) {
  TrainOptions t = TinyTrainOptions(data, run);
  t.config.model = kind;
  t.config.augment = false;
  t.config.lr = 1e-3;
  t.config.dynamics_lr_scale = 1.0;
  return t;
}

/// Copies of the parameters of a checkpoint's model, in the model's order.
inline std::vector<torch::Tensor> CheckpointParameters(const std::filesystem::path& checkpoint) {
  auto model = LoadModel(checkpoint, torch::kCPU);
  std::vector<torch::Tensor> out;
  for (auto& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

/// Trains `run` for `steps` steps straight (in run_dir + "-straight") and interrupted after
/// `first` steps, then resumed to `steps` (in run_dir + "-resumed"), and returns both final
/// checkpoints' parameters, for a test to compare.
inline std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> StraightAndResumed(
    TrainOptions run, int64_t first, int64_t steps) {
  const std::filesystem::path base = run.run_dir;
  TrainOptions straight = run;
  straight.run_dir = base.string() + "-straight";
  straight.config.max_steps = steps;
  Train(straight);
  TrainOptions resumed = run;
  resumed.run_dir = base.string() + "-resumed";
  resumed.config.max_steps = first;
  Train(resumed);
  resumed.config.max_steps = steps;
  resumed.resume = true;
  Train(resumed);
  return {CheckpointParameters(straight.run_dir / "checkpoints/last.pt"),
          CheckpointParameters(resumed.run_dir / "checkpoints/last.pt")};
}

}  // namespace keycld::testing
