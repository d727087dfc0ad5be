// keycld import | export: data sets from video files and PNG folders, and back (docs/import.md).
#include <cstdio>

#include "commands.h"
#include "keycld/data/import.h"
#include "keycld/util/error.h"

namespace keycld::cli {

namespace {
struct ImportArgs {
  ImportOptions o;
  std::vector<std::string> inputs, crop;
  std::string control, actions, out;
  double dt = 0;
};
}  // namespace

Runner AddImportCommand(CLI::App& app, std::shared_ptr<const GlobalOptions>) {
  auto a = std::make_shared<ImportArgs>();
  auto* cmd = app.add_subcommand(
      "import", "Turn video files or folders of PNG frames into a data set (no simulator state)");
  cmd->add_option("inputs", a->inputs, "Video files (MP4, MKV, …) or folders of PNG frames")
      ->required();
  cmd->add_option("--system", a->o.system,
                  "The system seen: a built-in name or a description file (docs/systems.md)")
      ->required();
  cmd->add_option("--out", a->out, "The data set file to write (.h5)")->required();
  cmd->add_option("--size", a->o.size, "Output image side in pixels")->capture_default_str();
  cmd->add_option("--frames", a->o.frames, "Frames per run (each input is cut into runs)")
      ->capture_default_str();
  cmd->add_option("--stride", a->o.stride, "Keep every n-th frame")->capture_default_str();
  cmd->add_option("--skip", a->o.skip, "Frames to drop at the start of each input")
      ->capture_default_str();
  cmd->add_option("--crop", a->crop,
                  "LEFT TOP SIDE: the square to cut, in source pixels (default: the largest "
                  "centred square)")
      ->expected(3);
  cmd->add_option("--actions", a->actions,
                  "CSV of actions: one row per input frame or per run, one column per actuator");
  cmd->add_option("--control", a->control,
                  "none | under | full (default: none, or full with --actions)");
  cmd->add_option("--dt", a->dt,
                  "Seconds between kept frames (default: stride / the video's frame rate)")
      ->check(FiniteRange(0, 1, /*lo_open=*/true));
  cmd->add_flag("--force", a->o.force, "Replace an existing output file");
  return [a, cmd] {
    ImportOptions o = a->o;
    for (const std::string& in : a->inputs) o.inputs.emplace_back(in);
    o.out = a->out;
    o.actions = a->actions;
    if (!a->control.empty()) o.control = ParseControlMode(a->control);
    if (cmd->count("--dt") > 0) o.dt = a->dt;
    if (!a->crop.empty()) {
      std::array<int, 3> c{};
      for (size_t i = 0; i < 3; ++i) {
        try {
          size_t used = 0;
          c[i] = std::stoi(a->crop[i], &used);
          if (used != a->crop[i].size()) throw std::invalid_argument("trailing");
        } catch (const std::exception&) {
          throw InputError("--crop: '" + a->crop[i] + "' is not a whole number of pixels");
        }
      }
      o.crop = c;
    }
    ImportResult r = ImportDataset(o);
    std::printf(
        "wrote %s: %d runs x %d frames at %dx%d, dt %.6g s, from %lld frames read (%lld "
        "dropped) in %.1f s; VPT threshold eps = %.6f; no simulator state (imported)\n",
        r.path.c_str(), r.info.runs, r.info.frames, r.info.size, r.info.size, r.info.dt,
        static_cast<long long>(r.frames_read), static_cast<long long>(r.frames_dropped), r.seconds,
        r.info.vpt_epsilon);
    return 0;
  };
}

Runner AddExportCommand(CLI::App& app, std::shared_ptr<const GlobalOptions>) {
  auto o = std::make_shared<ExportOptions>();
  auto data = std::make_shared<std::string>(), out = std::make_shared<std::string>(),
       actions = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "export", "Write a data set's frames as a video (H.264) or a folder of PNG frames");
  cmd->add_option("data", *data, "The data set (.h5)")->required();
  cmd->add_option("--out", *out,
                  "A video file (.mp4, .mkv) or, without an extension, a new folder of PNGs")
      ->required();
  cmd->add_option("--runs", o->runs, "all | train | validation | run indices 0,5,7")
      ->capture_default_str();
  cmd->add_option("--scale", o->scale, "Pixel repetition (nearest), 1 to 64")
      ->capture_default_str();
  cmd->add_option("--crf", o->crf, "H.264 quality: 0 lossless … 51 worst (18 ≈ visually lossless)")
      ->capture_default_str();
  cmd->add_option("--actions", *actions, "Also write the actions as CSV, one row per frame");
  cmd->add_flag("--force", o->force, "Replace an existing video or CSV file");
  return [o, data, out, actions] {
    ExportOptions e = *o;
    e.data = *data;
    e.out = *out;
    e.actions = *actions;
    ExportResult r = ExportDataset(e);
    std::printf("wrote %s: %d runs, %lld frames at %.6g frames/s%s%s\n", e.out.c_str(), r.runs,
                static_cast<long long>(r.frames), r.fps, e.actions.empty() ? "" : "; actions in ",
                e.actions.c_str());
    return 0;
  };
}

}  // namespace keycld::cli
