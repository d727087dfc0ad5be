// Files a closed-loop control run leaves behind (docs/method.md §10): the per-step CSV, the plot of
// the true joint errors and the video with the keypoints and the target drawn over the frames.
// Every file is written atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "keycld/control/closed_loop.h"
#include "keycld/sim/environment.h"

namespace keycld {

/// One row per step, comma-separated, header first:
///   time, qpos_<joint>…, qvel_<joint>…, [error_<joint>… when target_qpos is given],
///   x1, y1, …, xK, yK (estimated keypoints), xdot1, ydot1, … (estimated velocity) — or, for the
///   angle law (a step's state of one value), q_model, qdot_model (rad, rad/s) —,
///   u_<actuator>… (applied), u_unclipped_<actuator>…, u_gravity_<actuator>… (its gravity
///   compensation part), input_accel_<actuator>… (ControlAction::input_acceleration),
///   [reference_u_unclipped_<actuator>…, reference_u_gravity_<actuator>…,
///   reference_input_accel_<actuator>… when the steps have a reference controller's actions],
///   potential, kinetic, energy
/// Units: s, rad or m (and per s), normalized image coordinates (and per s), actuator units,
/// the model's energy unit. Throws InputError for no steps or steps of which only some have a
/// reference, IoError if it cannot be written.
void WriteControlCsv(const std::filesystem::path& csv, const Environment& env,
                     const std::vector<ControlStep>& steps,
                     const std::optional<std::vector<double>>& target_qpos);

/// A frame of the loop kept for the video: the rendered image uint8 [S, S, 3] and the index of
/// its step in the recorded steps.
struct ControlFrame {
  std::vector<uint8_t> rgb;
  size_t step = 0;
};

/// The side of the video (pixels): the frames upscaled by the smallest integer factor that
/// makes them at least 160 px.
int ControlVideoScale(int image_size);

/// Writes the frames as a looping GIF (`delay_cs` hundredths of a second per frame), each
/// upscaled by ControlVideoScale: the estimated keypoints of the frame's step as filled discs
/// (KeypointColor(k)), the target keypoints x* [2K] as white crosses (nothing drawn for the
/// angle law's generalised coordinates, ControlStep::coordinates, which are not image
/// positions). Throws InputError for no frames, a frame of another size or a step index outside
/// `steps`; IoError on write failure.
void WriteControlVideo(const std::filesystem::path& gif, const std::vector<ControlFrame>& frames,
                       int image_size, const std::vector<ControlStep>& steps,
                       const std::vector<double>& target_keypoints, int delay_cs);

/// PNG line plot of the true joint errors q − q* (wrapped; rad for hinges, m for slides) over
/// time, one curve per joint, dashed lines at ± each distinct tolerance. Throws InputError for
/// no steps or a target of the wrong size; IoError on write failure.
void WriteErrorPlot(const std::filesystem::path& png, const Environment& env,
                    const std::vector<ControlStep>& steps, const std::vector<double>& target_qpos,
                    const std::vector<double>& tolerances, const std::string& title);

}  // namespace keycld
