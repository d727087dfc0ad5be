// keycld evaluate: VPT and the report of a trained run (docs/method.md §8).
#include <cstdio>

#include "commands.h"
#include "keycld/eval/evaluate.h"
#include "keycld/util/error.h"

namespace keycld::cli {

namespace {
struct EvaluateArgs {
  StartEstimate start_estimate;
  std::string run_dir, data, out, solver = "dopri5", device, checkpoint;
  int threads = 0, energy_frames = 500;
  bool no_plots = false, all_checkpoints = false;
};
}  // namespace

void AddStartEstimateOptions(CLI::App* cmd, StartEstimate* s) {
  cmd->add_flag("--tta", s->dihedral_average,
                "Test-time augmentation: the start keypoints are the mean over the 8 dihedral "
                "transforms of each of the first three frames (docs/evaluation.md)");
  cmd->add_option("--refine-start", s->refine_steps,
                  "Refine the start state by render and compare: Adam steps on the first three "
                  "frames (0 = the paper's start; docs/evaluation.md)")
      ->capture_default_str();
  cmd->add_option("--refine-lr", s->refine_lr,
                  "Learning rate of the start refinement (normalized image units)")
      ->capture_default_str();
}

Runner AddEvaluateCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global) {
  auto a = std::make_shared<EvaluateArgs>();
  auto* cmd =
      app.add_subcommand("evaluate",
                         "VPT on every validation run, error curve, constraint residuals, masses, "
                         "energy, plots: RUN_DIR/report/evaluation.{json,md}");
  cmd->add_option("run_dir", a->run_dir, "Training run folder")->required();
  cmd->add_option("--data", a->data, "Data set (default: the one the run was trained on)");
  cmd->add_option("--checkpoint", a->checkpoint,
                  "Checkpoint (default RUN_DIR/checkpoints/last.pt)");
  cmd->add_option("--solver", a->solver, "dopri5 (docs/method.md §8) | rk4 | euler")
      ->check(CLI::IsMember(Names<IntegratorMethod>()))
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Output folder (default RUN_DIR/report)");
  cmd->add_option("--energy-frames", a->energy_frames,
                  "Frames of the unactuated rollout for the energy plot")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "LibTorch threads (0 = all cores)")
      ->capture_default_str();
  AddStartEstimateOptions(cmd, &a->start_estimate);
  cmd->add_option("--device", a->device, "cpu | cuda | cuda:N (default: the run's)");
  cmd->add_flag("--no-plots", a->no_plots, "Skip the PNG figures");
  cmd->add_flag("--all-checkpoints", a->all_checkpoints,
                "Evaluate every checkpoints/epoch-NNNN.pt: VPT and diagnostics per epoch "
                "(checkpoints.{md,json,png})")
      ->excludes("--checkpoint");
  return [a] {
    EvaluateOptions o;
    o.run_dir = a->run_dir;
    o.data = a->data;
    o.checkpoint = a->checkpoint;
    o.out_dir = a->out;
    o.method = ParseIntegratorMethod(a->solver);
    o.energy_frames = a->energy_frames;
    o.threads = a->threads;
    o.device = a->device;
    o.start_estimate = a->start_estimate;
    o.plots = !a->no_plots;
    if (a->all_checkpoints) {
      std::vector<CheckpointRow> rows = EvaluateCheckpoints(o);
      const std::filesystem::path out = o.out_dir.empty() ? o.run_dir / "report" : o.out_dir;
      std::printf("%zu checkpoints; table: %s\n", rows.size(), (out / "checkpoints.md").c_str());
      return 0;
    }
    EvaluationReport r = Evaluate(o);
    std::printf("%s", FormatEvaluationSummary(r).c_str());
    std::printf("report: %s (%zu files, %.1f s)\n",
                (r.files.empty() ? std::filesystem::path() : r.files.back()).c_str(),
                r.files.size(), r.seconds);
    return 0;
  };
}

}  // namespace keycld::cli
