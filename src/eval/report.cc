#include "keycld/eval/report.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "keycld/util/atomic_file.h"

namespace keycld {

namespace fs = std::filesystem;

namespace {
std::string Num(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}
// A link from the report folder to `file` (files in the folder by name).
std::string Link(const fs::path& report_dir, const fs::path& file) {
  std::error_code ec;
  fs::path rel = fs::relative(file, report_dir, ec);
  return (ec || rel.empty() ? file : rel).generic_string();
}
}  // namespace

fs::path WriteRunReport(const RunReportInputs& in) {
  const EvaluationReport& e = in.evaluation;
  const fs::path dir = in.run_dir / "report";
  std::ostringstream md;
  md << "# keycld run: " << e.env << ", control " << e.control << "\n\n"
     << "**Valid prediction time: " << Num("%.2f", e.vpt.mean) << " ± " << Num("%.2f", e.vpt.std)
     << " frames (median " << Num("%.1f", e.vpt.median) << ") over " << e.vpt.vpt.size()
     << " validation runs**, " << e.solver
     << " rollouts from the first three frames (docs/method.md §8).\n\n"
     << "| step | |\n| --- | --- |\n"
     << "| configuration | `" << in.config_file.string() << "` (resolved: `"
     << Link(dir, in.run_dir / "config.toml") << "`) |\n"
     << "| data set | `" << in.data_file.string() << "`"
     << (in.data_seconds >= 0 ? ", generated in " + Num("%.0f", in.data_seconds) + " s"
                              : std::string(", reused"))
     << " |\n"
     << "| training | " << in.train_steps << " steps";
  if (in.seconds_per_step > 0) {
    md << ", this invocation " << Num("%.0f", in.train_seconds) << " s ("
       << Num("%.3f", in.seconds_per_step) << " s/step)";
  }
  md << "; metrics: `" << Link(dir, in.run_dir / "metrics.jsonl") << "` |\n"
     << "| evaluation | " << Num("%.0f", e.seconds) << " s: [evaluation.md](evaluation.md), "
     << "[evaluation.json](evaluation.json) |\n"
     << "| whole job | " << Num("%.0f", in.total_seconds) << " s |\n\n"
     << "## Numbers\n\n"
     << "| | |\n| --- | --- |\n"
     << "| VPT threshold ε | " << Num("%.3g", e.epsilon) << " |\n"
     << "| learned masses m_k | ";
  for (size_t k = 0; k < e.masses.size(); ++k) md << (k ? ", " : "") << Num("%.3g", e.masses[k]);
  if (e.masses.empty()) md << "n/a (no learned Lagrangian of keypoints: " << e.model << ")";
  md << " |\n"
     << "| constraint residual of the estimated keypoints (state grid) | "
     << (e.image_keypoints
             ? "RMS " + Num("%.3g", e.constraint_rms) + ", max " + Num("%.3g", e.constraint_max)
             : std::string("n/a (the model's states are generalised coordinates, "
                           "not image keypoints)"))
     << " |\n"
     << "| learned V against the simulator's potential energy (R²) | "
     << (std::isfinite(e.potential_r2) ? Num("%.3f", e.potential_r2) : std::string("n/a")) << " |\n"
     << "| learned-energy variation along an unactuated rollout | "
     << (std::isfinite(e.energy_relative_variation) ? Num("%.3g", e.energy_relative_variation)
                                                    : std::string("n/a"))
     << " of V's range |\n\n";
  if (!in.prediction_files.empty()) {
    md << "## Long-term prediction\n\n";
    if (!in.prediction_summary.empty()) md << in.prediction_summary << "\n\n";
    for (const fs::path& f : in.prediction_files) {
      const std::string ext = f.extension().string();
      if (ext == ".gif" || ext == ".png") {
        md << "![" << f.filename().string() << "](" << Link(dir, f) << ")\n\n";
      } else {
        md << "- [" << f.filename().string() << "](" << Link(dir, f) << ")\n";
      }
    }
    md << "\n";
  }
  md << "## Figures\n\n";
  for (const fs::path& f : e.files) {
    if (f.extension() == ".png") {
      md << "### " << f.stem().string() << "\n\n![" << f.stem().string() << "](" << Link(dir, f)
         << ")\n\n";
    }
  }
  const fs::path file = dir / "report.md";
  WriteTextAtomically(file, md.str());
  return file;
}

}  // namespace keycld
