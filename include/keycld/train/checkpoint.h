// Checkpoints of training runs: model, optimizer and the exact training position, in one
// LibTorch archive written atomically.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "keycld/models/registry.h"

namespace keycld {

inline constexpr const char* kCheckpointFormat = "keycld-checkpoint";
/// Version 2 names the model variant ("model": keycld | keycld-nc | node2); version 1 (before
/// variants) said "dynamics": constrained | unconstrained and is still read.
inline constexpr int64_t kCheckpointVersion = 2;

/// Where training stands: enough to continue bit for bit.
struct TrainPosition {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // current epoch (0-based)
  int64_t step_in_epoch = 0;   // sequences of this epoch already used
  std::vector<int64_t> order;  // this epoch's order of training runs
  std::string rng_state;       // std::mt19937_64 state (augmentation, shuffling)
  /// The resolved training configuration (TrainConfig::ToToml) the checkpoint was trained with,
  /// so a checkpoint file alone says how it was made (integrator, weights, schedule); empty in
  /// checkpoints written before it was recorded.
  std::string config_toml;
};

/// Writes `file` atomically (temporary + rename). `optimizer` may be null (model only).
/// Throws IoError.
void SaveCheckpoint(const std::filesystem::path& file, Model& model,
                    torch::optim::Optimizer* optimizer, const TrainPosition& position);

/// Reads the model spec of a checkpoint (versions 1 and 2). Throws IoError (missing) or
/// FormatError (corrupt, foreign, unknown version), naming the file.
ModelSpec ReadCheckpointSpec(const std::filesystem::path& file);

/// The training configuration recorded in a checkpoint (TrainPosition::config_toml; "" for older
/// checkpoints). Throws as ReadCheckpointSpec.
std::string ReadCheckpointConfig(const std::filesystem::path& file);

/// Loads a model onto `device` from a checkpoint file, or from a run folder (its
/// checkpoints/last.pt).
Model LoadModel(const std::filesystem::path& file_or_run, const torch::Device& device);

/// Restores parameters, optimizer state and position into an existing model/optimizer of the
/// same spec. Throws FormatError if the checkpoint does not match.
void LoadCheckpoint(const std::filesystem::path& file, Model& model,
                    torch::optim::Optimizer* optimizer, TrainPosition* position);

}  // namespace keycld
