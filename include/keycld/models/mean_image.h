// The baselines' adaptation to scenes with a background (docs/baselines.md): the data set's mean
// frame, checked once, and its logits, where a decoder's output starts.
#pragma once

#include <torch/torch.h>

#include "keycld/models/model.h"

namespace keycld {

/// The logits of the mean frame, float32 [3, H, W] (the frame clamped to [1e-3, 1 − 1e-3] first):
/// a sigmoid decoder whose output bias is these draws the mean frame. mean_image [3, H, W] in
/// [0, 1] with H = W = spec.image_size; InputError naming spec.model otherwise.
torch::Tensor MeanImageLogits(const ModelSpec& spec, const torch::Tensor& mean_image);

/// The Lagrangian VAEs' start at the mean frame (docs/baselines.md): input_mean (the encoders'
/// offset) ← mean_image; the background logits ← MeanImageLogits when `background` is defined
/// (lag-cavae), else the bias of the MLP decoder's last layer (index 4, lag-vae). Without
/// gradients; InputError as MeanImageLogits.
void StartAtMeanImage(const ModelSpec& spec, const torch::Tensor& mean_image,
                      torch::Tensor& input_mean, torch::Tensor& background,
                      torch::nn::Sequential& decoder);

}  // namespace keycld
