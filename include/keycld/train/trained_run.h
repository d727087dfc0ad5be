// Opening a trained run: the one way evaluate, predict, benchmark and control load a run folder
// (config.toml, a checkpoint, the data set it was trained on) and check that the pieces fit.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "keycld/data/dataset.h"
#include "keycld/models/registry.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/config.h"

namespace keycld {

struct TrainedRunOptions {
  /// A run folder, or a checkpoint file inside one (RUN/checkpoints/NAME.pt).
  std::filesystem::path run;
  std::filesystem::path checkpoint;  // empty = the file given as `run`, or RUN/checkpoints/last.pt
  std::filesystem::path data;        // empty = the data set named by the run's config.toml
  bool open_data = true;             // false: leave `data` closed (control needs no data set)
  std::string device;                // empty = the run's config; cpu | cuda | cuda:N
  int threads = 0;                   // LibTorch intra-op threads to set (0 = all cores)
};

struct TrainedRun {
  std::filesystem::path run_dir, checkpoint, data_file;
  TrainConfig config;           // config.toml of the run
  Model model{nullptr};         // in eval mode, on the chosen device
  TrainPosition position;       // where training stood when the checkpoint was written
  std::optional<Dataset> data;  // open unless open_data is false
};

/// Opens a run: sets the thread count, reads config.toml (optional when `data` is given: the
/// defaults stand), loads the checkpoint onto the device and opens the data set, checking that
/// it fits the model (environment, image size, actuators, frame interval). The data set the
/// config names is looked for relative to the working directory, then to the folder above the
/// run's parent (where `keycld run` keeps data/ next to runs/). Throws IoError (missing folder,
/// config, checkpoint or data set, naming what to pass), FormatError (corrupt files) and
/// InputError (a data set that does not fit, a bad device or thread count).
TrainedRun OpenTrainedRun(const TrainedRunOptions& options);

/// Sets LibTorch's intra-op threads, and OpenBLAS's when it is the system BLAS: `threads` if
/// > 0, else every core. InputError if < 0 or > 1024.
void SetThreads(int threads);

}  // namespace keycld
