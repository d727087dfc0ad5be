#include "keycld/eval/predict.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <thread>

#include "keycld/eval/plot.h"
#include "keycld/eval/video.h"
#include "keycld/sim/environment.h"
#include "keycld/sim/offscreen_renderer.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/config.h"
#include "keycld/train/trained_run.h"
#include "keycld/train/trainer.h"
#include "keycld/train/vpt.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"
#include "keycld/util/image_io.h"
#include "keycld/util/interrupt.h"
#include "keycld/util/progress.h"

namespace keycld {

namespace fs = std::filesystem;

namespace {

constexpr int kMaxFrames = 100000;
constexpr int64_t kChunk = 64;  // frames encoded / rendered at once
constexpr Rgb kWhite = {255, 255, 255}, kValid = {40, 170, 60}, kInvalid = {215, 40, 40},
              kPending = {225, 225, 225};

void CheckInterrupt() {
  if (InterruptRequested()) throw Interrupted("interrupted; no prediction files were written");
}

// uint8 [count, H, W, 3] → float [count, 3, H, W] in [0, 1] on `device`.
torch::Tensor FramesToFloat(const std::vector<uint8_t>& frames, int64_t start, int64_t count,
                            int size, const torch::Device& device) {
  const int64_t frame_bytes = int64_t(size) * size * 3;
  torch::Tensor u8 = torch::from_blob(const_cast<uint8_t*>(frames.data()) + start * frame_bytes,
                                      {count, size, size, 3}, torch::kUInt8);
  return ImagesToFloat(u8, device);
}

void WriteCsv(const fs::path& path, const PredictionOutput& r, const torch::Tensor& predicted,
              const torch::Tensor& estimated) {
  const int64_t F = predicted.size(0), K = predicted.size(1);
  auto p = predicted.accessor<float, 3>();
  auto e = estimated.accessor<float, 3>();
  std::ostringstream out;
  {
    out << "frame,time_s";
    for (int64_t k = 0; k < K; ++k) out << ",pred_x" << k << ",pred_y" << k;
    for (int64_t k = 0; k < K; ++k) out << ",est_x" << k << ",est_y" << k;
    out << ",mse,valid\n";
    char buf[64];
    for (int64_t t = 0; t < F; ++t) {
      std::snprintf(buf, sizeof buf, "%lld,%.6f", static_cast<long long>(t), (t + 1) * r.dt);
      out << buf;
      for (int64_t k = 0; k < K; ++k) {
        std::snprintf(buf, sizeof buf, ",%.6f,%.6f", p[t][k][0], p[t][k][1]);
        out << buf;
      }
      for (int64_t k = 0; k < K; ++k) {
        std::snprintf(buf, sizeof buf, ",%.6f,%.6f", e[t][k][0], e[t][k][1]);
        out << buf;
      }
      std::snprintf(buf, sizeof buf, ",%.6e,%d\n", r.mse[t], r.mse[t] <= r.epsilon ? 1 : 0);
      out << buf;
    }
  }
  WriteTextAtomically(path, out.str());
}

void WriteMsePlot(const fs::path& path, const PredictionOutput& r, const std::string& setting,
                  int index) {
  PlotSeries mse{"prediction MSE", {}, {}, {}};
  double lo = r.epsilon, hi = r.epsilon;
  for (size_t t = 0; t < r.mse.size(); ++t) {
    // A log axis: exact frames (MSE 0) sit at the bottom.
    const double v = std::isfinite(r.mse[t]) ? std::max(r.mse[t], 1e-12) : 1e3;
    mse.x.push_back(double(t));
    mse.y.push_back(v);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  char label[96];
  std::snprintf(label, sizeof label, "VPT %d frames (%.2f s)", r.vpt, r.vpt * r.dt);
  PlotSeries vpt{label, {double(r.vpt), double(r.vpt)}, {lo, hi}, {}};
  PlotOptions o;
  char title[200];
  std::snprintf(title, sizeof title,
                "%s, validation run %d (data set run %d): MSE per frame, eps = %.3g (dashed)",
                setting.c_str(), index, r.dataset_run, r.epsilon);
  o.title = title;
  o.x_label = "frame (dt = " + std::to_string(r.dt).substr(0, 6) + " s)";
  o.y_label = "per-pixel MSE";
  o.log_y = true;
  o.h_lines = {r.epsilon};
  WriteLinePlot(path, {mse, vpt}, o);
}

// The option checks that need no file, then the run (OpenTrainedRun) and the validation run.
TrainedRun OpenForPrediction(const PredictOptions& o) {
  if (o.frames < 3 || o.frames > kMaxFrames) {
    throw InputError("--frames must be in [3, " + std::to_string(kMaxFrames) +
                     "] (the prediction starts from three frames), got " +
                     std::to_string(o.frames));
  }
  if (o.scale < 1 || o.scale > 16) {
    throw InputError("--scale must be in [1, 16], got " + std::to_string(o.scale));
  }
  if (o.run < 0) throw InputError("--run must be ≥ 0, got " + std::to_string(o.run));
  CheckStartEstimate(o.start_estimate);
  if (o.threads < 0 || o.threads > 1024) {
    throw InputError("--threads must be in [0, 1024] (0 = every core), got " +
                     std::to_string(o.threads));
  }
  if (o.run_dir.empty()) throw InputError("no run folder given");
  if (!fs::is_directory(o.run_dir)) {
    throw InputError("run folder '" + o.run_dir.string() + "' does not exist");
  }
  const fs::path checkpoint =
      o.checkpoint.empty() ? o.run_dir / "checkpoints" / "last.pt" : o.checkpoint;
  if (!fs::exists(checkpoint)) {
    throw InputError("no checkpoint in '" + o.run_dir.string() + "': '" + checkpoint.string() +
                     "' does not exist (train the run first)");
  }
  const fs::path config_file = o.run_dir / "config.toml";
  if (o.data.empty() && !fs::exists(config_file)) {
    throw InputError("'" + config_file.string() +
                     "' does not exist, so the run names no data set: pass --data FILE");
  }
  if (!o.data.empty() && !fs::exists(o.data)) {
    throw IoError("data set not found: '" + o.data.string() + "'");
  }
  TrainedRunOptions to;
  to.run = o.run_dir;
  to.checkpoint = checkpoint;
  to.data = o.data;
  to.device = o.device;
  to.threads = o.threads;
  TrainedRun run = OpenTrainedRun(to);
  const std::vector<int64_t> validation = run.data->ValidationRuns();
  if (o.run >= int(validation.size())) {
    throw InputError(
        "--run " + std::to_string(o.run) + " is out of range: '" + run.data_file.string() +
        "' has " + std::to_string(validation.size()) + " validation runs" +
        (validation.empty() ? "" : " (0 to " + std::to_string(validation.size() - 1) + ")"));
  }
  return run;
}

// Ground truth of r->dataset_run: the stored frames, then the same simulator beyond them.
std::vector<uint8_t> GroundTruthFrames(const Dataset& data, GlBackend gl, PredictionOutput* r) {
  const DatasetInfo& info = data.info();
  r->stored_frames = std::min(r->frames, info.frames);
  r->simulated_frames = r->frames - r->stored_frames;
  std::vector<uint8_t> truth = data.ReadImages(r->dataset_run);
  truth.resize(size_t(info.size) * info.size * 3 * size_t(r->stored_frames));
  if (r->simulated_frames > 0) {
    std::vector<uint8_t> more =
        ResimulateFrames(data, r->dataset_run, info.frames - 1, r->simulated_frames, gl);
    truth.insert(truth.end(), more.begin(), more.end());
  }
  return truth;
}

// The keypoint prediction from the first three frames (§8; HGN: its first five): Dormand–Prince at
// the run config's tolerances. Returns float [F, K, 2] on the CPU.
torch::Tensor PredictFromFirstFrames(Model& model, const TrainedRun& run,
                                     std::vector<uint8_t>& truth,
                                     const StartEstimate& start_estimate, PredictionOutput* r) {
  const DatasetInfo& info = run.data->info();
  const int S = info.size;
  const std::vector<double> action = run.data->ReadAction(r->dataset_run);
  torch::Tensor actions =
      torch::tensor(std::vector<double>(action.begin(), action.begin() + info.nu))
          .to(torch::kFloat32)
          .reshape({1, info.nu});
  const int64_t F0 = PredictionInputFrames(model);
  if (r->frames < F0) {
    throw InputError("model '" + model->spec().model + "' predicts from its first " +
                     std::to_string(F0) + " frames: --frames must be at least " +
                     std::to_string(F0) + ", got " + std::to_string(r->frames));
  }
  torch::Tensor first3 = torch::from_blob(truth.data(), {1, F0, S, S, 3}, torch::kUInt8).clone();
  IntegratorOptions io;
  io.rtol = run.config.rtol;
  io.atol = run.config.atol;
  io.max_steps = std::max<int64_t>(io.max_steps, int64_t(r->frames) * 2000);
  KeypointPrediction prediction = PredictKeypoints(model, first3, actions, r->frames,
                                                   IntegratorMethod::kDopri5, io, start_estimate);
  r->accepted_steps = prediction.accepted_steps;
  r->rejected_steps = prediction.rejected_steps;
  return prediction.keypoints[0].to(torch::kCPU).contiguous();
}

// The predicted frames rendered, the estimator's reading of the true frames, and the MSE of
// every frame (r->mse, r->vpt).
struct ScoredFrames {
  torch::Tensor rendered;   // [F, 3, S, S]
  torch::Tensor heatmaps;   // [F, K, S, S]; undefined for a model without image keypoints
  torch::Tensor estimated;  // [F, K, 2]
  // Models whose states are not image keypoints (the VAE baselines): the true frames rendered
  // from their own estimates [F, 3, S, S], shown instead of the heatmaps, and no marks.
  torch::Tensor reconstructed;
};

ScoredFrames ScoreFrames(Model& model, const std::vector<uint8_t>& truth,
                         const torch::Tensor& predicted, int S, const torch::Device& device,
                         ProgressBar& bar, PredictionOutput* r) {
  const int F = r->frames;
  std::vector<torch::Tensor> rendered, heatmaps, estimates, mses, reconstructed;
  const bool image_keypoints = model->StatesAreImageKeypoints();
  torch::NoGradGuard no_grad;
  for (int64_t s = 0; s < F; s += kChunk) {
    const int64_t n = std::min<int64_t>(kChunk, F - s);
    torch::Tensor images = FramesToFloat(truth, s, n, S, device);
    torch::Tensor out = model->Render(predicted.slice(0, s, s + n).to(device));
    // An encoder of stacked frames (HGN) reads the frames after the chunk too.
    const int64_t more = std::min<int64_t>(model->EncoderFrames() - 1, F - s - n);
    Encoding enc = model->Encode(more > 0 ? FramesToFloat(truth, s, n + more, S, device) : images);
    enc.keypoints = enc.keypoints.slice(0, 0, n);
    mses.push_back((out - images).square().mean({1, 2, 3}).to(torch::kCPU));
    rendered.push_back(out.to(torch::kCPU));
    if (image_keypoints) {
      heatmaps.push_back(enc.heatmaps.to(torch::kCPU));
    } else {
      reconstructed.push_back(model->Render(enc.keypoints).to(torch::kCPU));
    }
    estimates.push_back(enc.keypoints.to(torch::kCPU, torch::kFloat32));
    bar.Update(s + n);
    CheckInterrupt();
  }
  torch::Tensor mse = torch::cat(mses).to(torch::kFloat64).reshape({1, F});
  VptResult vpt = VptFromMse(mse, r->epsilon);
  r->vpt = vpt.vpt[0];
  r->mse.assign(vpt.mse.data_ptr<double>(), vpt.mse.data_ptr<double>() + F);
  if (!image_keypoints) {
    return {
        torch::cat(rendered), {}, torch::cat(estimates).contiguous(), torch::cat(reconstructed)};
  }
  return {torch::cat(rendered), torch::cat(heatmaps), torch::cat(estimates).contiguous(), {}};
}

// One GIF frame: truth | heatmaps with the estimated keypoints | prediction with the predicted
// keypoints | error, over a timeline of valid (green) and invalid (red) frames up to t. For a
// model without image keypoints: truth | reconstruction of the estimate | prediction | error.
Canvas ComposeFrame(int t, const std::vector<uint8_t>& truth, const ScoredFrames& scored,
                    const torch::Tensor& predicted, const PredictionOutput& r, int S, int s) {
  const int F = r.frames, K = int(predicted.size(1)), gap = 2 * s, strip = std::max(3, s);
  const size_t frame_bytes = size_t(S) * S * 3;
  auto est = scored.estimated.accessor<float, 3>();
  auto pred = predicted.accessor<float, 3>();
  Canvas gt = Canvas::FromPixels(
      std::vector<uint8_t>(truth.begin() + frame_bytes * t, truth.begin() + frame_bytes * (t + 1)),
      S, S);
  Canvas out = Canvas::FromTensor(scored.rendered[t]);
  Canvas error = ErrorImage(gt, out).Upscaled(s);
  const bool marks = scored.heatmaps.defined();
  Canvas heat =
      (marks ? ColorizeHeatmaps(scored.heatmaps[t]) : Canvas::FromTensor(scored.reconstructed[t]))
          .Upscaled(s);
  Canvas frame = out.Upscaled(s);
  for (int k = 0; marks && k < K; ++k) {
    heat.DrawCross(est[t][k][0], est[t][k][1], 1.5 * s, std::max(1.0, s / 2.0), kWhite);
    frame.FillDisc(pred[t][k][0], pred[t][k][1], 0.9 * s + 0.5, KeypointColor(k));
  }
  Canvas panels = HStack({gt.Upscaled(s), heat, frame, error}, gap, kWhite);
  Canvas canvas(panels.width(), panels.height() + s + strip, kWhite);
  canvas.Blit(panels, 0, 0);
  for (int x = 0; x < canvas.width(); ++x) {
    const int f = int(int64_t(x) * F / canvas.width());
    const Rgb c = f > t ? kPending : (r.mse[size_t(f)] <= r.epsilon ? kValid : kInvalid);
    canvas.FillRect(x, panels.height() + s, x + 1, canvas.height(), c);
  }
  return canvas;
}

// The GIF, with 16 evenly spaced frames as the palette sample.
void WriteGif(const std::vector<uint8_t>& truth, const ScoredFrames& scored,
              const torch::Tensor& predicted, const PredictionOutput& r, int S, int scale,
              ProgressBar& bar) {
  const int F = r.frames;
  std::vector<Canvas> sample;
  for (int i = 0; i < 16; ++i) {
    sample.push_back(
        ComposeFrame(int(int64_t(i) * (F - 1) / 15), truth, scored, predicted, r, S, scale));
  }
  std::vector<std::span<const uint8_t>> views;
  for (const Canvas& c : sample) views.emplace_back(c.pixels());
  const int delay = std::max(2, int(std::lround(100 * r.dt)));
  GifWriter gif(r.gif, sample[0].width(), sample[0].height(), delay, views);
  for (int t = 0; t < F; ++t) {
    gif.Add(ComposeFrame(t, truth, scored, predicted, r, S, scale).pixels());
    bar.Update(int64_t(F) + t + 1);
    CheckInterrupt();
  }
  gif.Finish();
}

}  // namespace

std::vector<uint8_t> ResimulateFrames(const Dataset& data, int run, int from_frame, int count,
                                      GlBackend gl) {
  const DatasetInfo& info = data.info();
  if (run < 0 || run >= info.runs) {
    throw InputError("ResimulateFrames: run " + std::to_string(run) + " is outside [0, " +
                     std::to_string(info.runs) + ")");
  }
  if (from_frame < 0 || from_frame >= info.frames) {
    throw InputError("ResimulateFrames: frame " + std::to_string(from_frame) + " is outside [0, " +
                     std::to_string(info.frames) + ")");
  }
  if (count < 0) throw InputError("ResimulateFrames: count must be ≥ 0");
  if (count == 0) return {};
  const std::vector<double> qpos = data.ReadQpos(run), qvel = data.ReadQvel(run),
                            action = data.ReadAction(run);
  Environment env(DatasetSystem(info));
  if (env.nq() != info.nq || env.nv() != info.nv || env.nu() != info.nu) {
    throw FormatError("'" + data.path().string() + "': nq/nv/nu do not match the " + info.system +
                      " model");
  }
  env.Reset(std::span(qpos.data() + size_t(from_frame) * info.nq, size_t(info.nq)),
            std::span(qvel.data() + size_t(from_frame) * info.nv, size_t(info.nv)));
  env.SetAction(std::span(action.data() + size_t(from_frame) * info.nu, size_t(info.nu)));
  auto context = GlContext::Create(gl);
  OffscreenRenderer renderer(env, *context, info.size);
  const size_t frame_bytes = size_t(info.size) * info.size * 3;
  std::vector<uint8_t> frames(frame_bytes * count);
  for (int i = 0; i < count; ++i) {
    CheckInterrupt();
    env.Step();  // frame t is the state after t + 1 steps (docs/method.md §7)
    renderer.Render(env, std::span(frames.data() + frame_bytes * i, frame_bytes));
  }
  return frames;
}

PredictionOutput WritePrediction(const PredictOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  TrainedRun run = OpenForPrediction(o);
  InterruptGuard interrupt_guard;
  const DatasetInfo& info = run.data->info();
  const torch::Device device = run.model->device();
  PredictionOutput r;
  r.model = DescribeModel(run.model->spec());
  r.dataset_run = int(run.data->ValidationRuns()[size_t(o.run)]);
  // Without a simulator (a data set imported from video) the ground truth ends with the
  // recording's frames.
  r.frames = info.has_state() ? o.frames : std::min(o.frames, info.frames);
  r.limited_to_recording = r.frames < o.frames;
  r.dt = info.dt;
  r.epsilon = info.vpt_epsilon;
  std::vector<uint8_t> truth = GroundTruthFrames(*run.data, o.gl, &r);
  CheckInterrupt();
  const torch::Tensor predicted =
      PredictFromFirstFrames(run.model, run, truth, o.start_estimate, &r);
  CheckInterrupt();

  ProgressBar bar("predict", 2 * int64_t(r.frames), "frames", o.progress && ::isatty(2));
  const ScoredFrames scored = ScoreFrames(run.model, truth, predicted, info.size, device, bar, &r);
  const fs::path out_dir = o.out_dir.empty() ? o.run_dir / "report" : o.out_dir;
  const std::string stem = "predict-run" + std::to_string(o.run);
  r.gif = out_dir / (stem + ".gif");
  r.csv = out_dir / (stem + ".csv");
  r.mse_plot = out_dir / (stem + "-mse.png");
  WriteGif(truth, scored, predicted, r, info.size, o.scale, bar);
  bar.Finish();
  WriteCsv(r.csv, r, predicted, scored.estimated);
  WriteMsePlot(r.mse_plot, r, info.system + "-" + ControlModeString(info.control), o.run);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace keycld
