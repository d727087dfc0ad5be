// keycld predict: long-term video prediction of one validation run (GIF, CSV, MSE plot).
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "keycld/eval/predict.h"
#include "keycld/util/progress.h"

namespace keycld::cli {

namespace {
struct PredictArgs {
  StartEstimate start_estimate;
  std::string run_dir, data, out, checkpoint, device = "cpu";
  int run = 0, frames = 500, scale = 4, threads = 0;
};
}  // namespace

Runner AddPredictCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global) {
  auto a = std::make_shared<PredictArgs>();
  auto* cmd = app.add_subcommand(
      "predict",
      "Predict a validation run from its first three frames: GIF (truth | heatmaps | "
      "prediction | error), CSV of keypoints and MSE, MSE plot with the VPT");
  cmd->add_option("RUN_DIR", a->run_dir, "Training run folder (keycld train --out)")->required();
  cmd->add_option("--data", a->data, "Data set (default: the one the run's config.toml names)");
  cmd->add_option("--run", a->run, "Validation run, 0-based among the data set's validation runs")
      ->capture_default_str();
  cmd->add_option("--frames", a->frames,
                  "Frames to predict (≥ 3; beyond the stored ones the simulator continues)")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Output folder (default RUN_DIR/report)");
  cmd->add_option("--scale", a->scale, "GIF pixels per image pixel (1-16)")->capture_default_str();
  cmd->add_option("--threads", a->threads, "LibTorch threads (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("--checkpoint", a->checkpoint,
                  "Checkpoint file (default RUN_DIR/checkpoints/last.pt)");
  AddStartEstimateOptions(cmd, &a->start_estimate);
  cmd->add_option("--device", a->device, "cpu | cuda | cuda:N")->capture_default_str();
  return [a, global] {
    PredictOptions o;
    o.run_dir = a->run_dir;
    o.data = a->data;
    o.run = a->run;
    o.frames = a->frames;
    o.out_dir = a->out;
    o.scale = a->scale;
    o.threads = a->threads;
    o.checkpoint = a->checkpoint;
    o.device = a->device;
    o.start_estimate = a->start_estimate;
    o.gl = ParseGlBackend(global->gl);
    PredictionOutput r = WritePrediction(o);
    if (r.limited_to_recording) {
      std::printf(
          "note: %d frames, not %d: the data set was imported from video, and ground truth "
          "beyond the recording's frames needs a simulator\n",
          r.frames, a->frames);
    }
    std::printf("model: %s\n", r.model.c_str());
    std::printf(
        "predict: validation run %d (data set run %d): VPT %d frames (%.2f s, eps %.3g); "
        "%d frames (%d re-simulated) in %s: %s, %s, %s\n",
        a->run, r.dataset_run, r.vpt, r.vpt * r.dt, r.epsilon, r.frames, r.simulated_frames,
        FormatDuration(r.seconds).c_str(), r.gif.c_str(), r.csv.c_str(), r.mse_plot.c_str());
    return 0;
  };
}

}  // namespace keycld::cli
