// Files a closed-loop control run leaves behind (KEYCLD.md §10): the per-step CSV, the plot of
// the true joint errors and the video with the keypoints and the target drawn over the frames.
// Every file is written atomically.
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

#include "keycld/control/closed_loop.h"
#include "keycld/sim/environment.h"

namespace keycld {

/// One row per step, comma-separated, header first:
///   time, qpos_<joint>…, qvel_<joint>…, [error_<joint>… when target_qpos is given],
///   x1, y1, …, xK, yK (estimated keypoints), xdot1, ydot1, … (estimated velocity),
///   u_<actuator>… (applied), u_unclipped_<actuator>…, potential, kinetic, energy
/// Units: s, rad or m (and per s), normalized image coordinates (and per s), actuator units,
/// the model's energy unit. Throws InputError for no steps, IoError if it cannot be written.
void WriteControlCsv(const std::filesystem::path& csv, const Environment& env,
                     const std::vector<ControlStep>& steps,
                     const std::optional<std::vector<double>>& target_qpos);

}  // namespace keycld
