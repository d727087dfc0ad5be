// The dihedral group D4 of a square image: 4 rotations by 90° × optional mirror, the data
// augmentation of KeyCLD §6 (docs/method.md). Each frame gets one of the 8 transforms
// before the keypoint estimator; the inverse transform is applied to the estimator's logits
// before the spatial softmax, which makes the estimator equivariant.
//
// Numbering: transform t ∈ [0, 8) is t = r + 4·m, T_t = R^r ∘ M^m: first mirror left↔right
// if m = 1 (x → −x), then rotate counterclockwise (as displayed, row 0 on top) by r·90°
// ((x, y) → (−y, x) per quarter turn). t = 0 is the identity. Points in normalized image
// coordinates (KeyCLD §2, keypoints.h) move exactly as the image content moves, because the
// pixel-centre grids of a square image are symmetric.
//
// Images may have any leading dimensions: [..., H, W] with H == W (typically [B, C, H, W]).
// The functions need only the tensor type (torch::Tensor is at::Tensor) and follow the input's
// device and dtype; they are permutations, so they are exact and differentiable.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>

namespace keycld {

inline constexpr int kDihedralCount = 8;

/// Index of T_t⁻¹. Throws InputError unless 0 ≤ t < 8.
int DihedralInverse(int t);
/// Index of T_a ∘ T_b (T_b applied first). Throws InputError for an index out of [0, 8).
int DihedralCompose(int a, int b);

/// T_t applied to images [..., H, W] (H == W). Throws InputError for a bad t or non-square
/// images.
at::Tensor DihedralTransform(const at::Tensor& images, int t);
/// T_t⁻¹ applied to images [..., H, W] (H == W).
at::Tensor DihedralInverseTransform(const at::Tensor& images, int t);
/// T_t applied to points [..., 2] in normalized image coordinates: where the content at
/// (x, y) moves when DihedralTransform(images, t) is applied.
at::Tensor DihedralTransformKeypoints(const at::Tensor& keypoints, int t);

/// Per-frame transforms: frame b of images [B, ..., H, W] (H == W) gets T_{t_b}, with
/// `transform_ids` int64 [B] of values in [0, 8) (any device; moved to the images' device).
/// One gather, no per-frame loop. Throws InputError for a bad shape or an id out of range
/// (the range check reads the ids once, a device synchronisation on an accelerator).
at::Tensor DihedralTransformBatch(const at::Tensor& images, const at::Tensor& transform_ids);
/// Per-frame inverses: frame b gets T_{t_b}⁻¹.
at::Tensor DihedralInverseTransformBatch(const at::Tensor& images, const at::Tensor& transform_ids);
/// Per-frame point transforms: points [B, ..., 2] of frame b get T_{t_b}.
at::Tensor DihedralTransformKeypointsBatch(const at::Tensor& keypoints,
                                           const at::Tensor& transform_ids);
/// The ids of the inverse transforms, int64 [B] on the ids' device.
at::Tensor DihedralInverseIds(const at::Tensor& transform_ids);

/// The augmented evaluation of an image-to-maps network (KeyCLD §6): frame b of `images`
/// [B, C, H, W] (H == W) is transformed by T_{t_b}, passed through `network` (which must
/// return maps [B, K, H, W] of the same spatial size), and the maps are transformed back by
/// T_{t_b}⁻¹, so that they are in the original frame's coordinates. With an undefined
/// `transform_ids` this is just network(images). For a network that commutes with the
/// dihedral group (e.g. a 1×1 convolution) the result equals network(images) exactly.
/// Throws InputError for bad shapes or ids.
at::Tensor ApplyDihedralAugmented(const std::function<at::Tensor(const at::Tensor&)>& network,
                                  const at::Tensor& images, const at::Tensor& transform_ids);

/// `count` transform ids drawn uniformly from [0, 8): int64 [count] on `device`, from
/// `generator` when given (reproducible from one seed; it must be a generator of `device`'s
/// type, e.g. at::make_generator<at::CPUGeneratorImpl>(seed) for the CPU), else from
/// LibTorch's default generator. Throws InputError for count < 0.
at::Tensor RandomDihedralIds(int64_t count, const at::Device& device,
                             std::optional<at::Generator> generator = std::nullopt);

}  // namespace keycld
