// Dihedral augmentation of square images and their keypoints, KeyCLD §6.
#include "keycld/model/dihedral.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "keycld/util/error.h"

namespace keycld {
namespace {

void CheckIndex(int t, const char* who) {
  if (t < 0 || t >= kDihedralCount) {
    throw InputError(std::string(who) + ": dihedral transform index must be in [0, 8), got " +
                     std::to_string(t));
  }
}

void CheckSquare(const at::Tensor& images, const char* who) {
  if (!images.defined() || images.dim() < 2 || images.size(-1) != images.size(-2)) {
    std::string got = "undefined";
    if (images.defined()) {
      got = "[";
      for (int64_t i = 0; i < images.dim(); ++i) {
        got += (i ? ", " : "") + std::to_string(images.size(i));
      }
      got += "]";
    }
    throw InputError(std::string(who) + ": images must be square [..., H, W] with H == W, got " +
                     got);
  }
}

// Validates ids [B] against a leading batch size and returns them as int64 on `device`.
at::Tensor CheckIds(const at::Tensor& ids, int64_t batch, const at::Device& device,
                    const char* who) {
  if (!ids.defined() || ids.dim() != 1 || ids.size(0) != batch ||
      at::isFloatingType(ids.scalar_type()) || ids.scalar_type() == at::kBool) {
    throw InputError(std::string(who) + ": transform_ids must be an integer tensor [B] with B = " +
                     std::to_string(batch) + " (the leading dimension)");
  }
  at::Tensor out = ids.to(device, at::kLong);
  if (batch > 0 && ((out < 0) | (out >= kDihedralCount)).any().item<bool>()) {
    throw InputError(std::string(who) + ": transform_ids must be in [0, 8)");
  }
  return out;
}

// Per-pixel source index of every transform: int64 [8, N·N], row t lists for each output pixel
// (row-major) the input pixel it comes from. Built by transforming an index image, so it
// agrees with DihedralTransform by construction.
at::Tensor GatherTable(int64_t n, const at::Device& device) {
  at::Tensor index =
      at::arange(n * n, at::TensorOptions().dtype(at::kLong).device(device)).view({n, n});
  std::vector<at::Tensor> rows;
  rows.reserve(kDihedralCount);
  for (int t = 0; t < kDihedralCount; ++t) rows.push_back(DihedralTransform(index, t).reshape(-1));
  return at::stack(rows);
}

void CheckBatchImages(const at::Tensor& images, const char* who) {
  CheckSquare(images, who);
  if (images.dim() < 3) throw InputError(std::string(who) + ": images must be [B, ..., H, W]");
}

// Inverse ids of validated int64 ids: rotations r → (4 − r) mod 4, reflections are their own
// inverses (the table agrees with DihedralInverse, checked by the tests).
at::Tensor InverseIds(const at::Tensor& ids) {
  static const int64_t kInverse[kDihedralCount] = {0, 3, 2, 1, 4, 5, 6, 7};
  at::Tensor table = at::tensor(at::ArrayRef<int64_t>(kInverse, kDihedralCount),
                                at::TensorOptions().dtype(at::kLong))
                         .to(ids.device());
  return table.index_select(0, ids);
}

// Frame b of images [B, ..., N, N] gets T_{ids[b]}, validated int64 ids on the same device.
// One gather over the flattened pixels, no per-frame loop.
at::Tensor GatherFrames(const at::Tensor& images, const at::Tensor& ids) {
  const int64_t batch = images.size(0), n = images.size(-1);
  at::Tensor flat = images.reshape({batch, -1, n * n});                     // [B, C', N²]
  at::Tensor index = GatherTable(n, images.device()).index_select(0, ids);  // [B, N²]
  return flat.gather(2, index.unsqueeze(1).expand(flat.sizes())).view(images.sizes());
}

}  // namespace

int DihedralInverse(int t) {
  CheckIndex(t, "DihedralInverse");
  const int r = t % 4, m = t / 4;
  return m ? t : (4 - r) % 4;  // reflections are involutions; rotations invert by −r
}

int DihedralCompose(int a, int b) {
  CheckIndex(a, "DihedralCompose");
  CheckIndex(b, "DihedralCompose");
  // R^ra M^ma R^rb M^mb = R^(ra + (−1)^ma rb) M^(ma + mb), since M R = R⁻¹ M.
  const int ra = a % 4, ma = a / 4, rb = b % 4, mb = b / 4;
  const int r = ((ra + (ma ? -rb : rb)) % 4 + 4) % 4;
  return r + 4 * ((ma + mb) % 2);
}

at::Tensor DihedralTransform(const at::Tensor& images, int t) {
  CheckIndex(t, "DihedralTransform");
  CheckSquare(images, "DihedralTransform");
  const int r = t % 4, m = t / 4;
  at::Tensor out = m ? at::flip(images, {-1}) : images;
  return r ? at::rot90(out, r, {-2, -1}) : out;
}

at::Tensor DihedralInverseTransform(const at::Tensor& images, int t) {
  return DihedralTransform(images, DihedralInverse(t));
}

at::Tensor DihedralTransformKeypoints(const at::Tensor& keypoints, int t) {
  CheckIndex(t, "DihedralTransformKeypoints");
  if (!keypoints.defined() || keypoints.dim() < 1 || keypoints.size(-1) != 2) {
    throw InputError("DihedralTransformKeypoints: keypoints must be [..., 2]");
  }
  const int r = t % 4, m = t / 4;
  at::Tensor x = keypoints.select(-1, 0), y = keypoints.select(-1, 1);
  if (m) x = -x;
  for (int i = 0; i < r; ++i) {  // a quarter turn counterclockwise: (x, y) → (−y, x)
    at::Tensor nx = -y;
    y = x;
    x = nx;
  }
  return at::stack({x, y}, -1);
}

at::Tensor DihedralTransformBatch(const at::Tensor& images, const at::Tensor& transform_ids) {
  CheckBatchImages(images, "DihedralTransformBatch");
  return GatherFrames(
      images, CheckIds(transform_ids, images.size(0), images.device(), "DihedralTransformBatch"));
}

at::Tensor DihedralInverseTransformBatch(const at::Tensor& images,
                                         const at::Tensor& transform_ids) {
  CheckBatchImages(images, "DihedralInverseTransformBatch");
  return GatherFrames(images, InverseIds(CheckIds(transform_ids, images.size(0), images.device(),
                                                  "DihedralInverseTransformBatch")));
}

at::Tensor DihedralTransformKeypointsBatch(const at::Tensor& keypoints,
                                           const at::Tensor& transform_ids) {
  if (!keypoints.defined() || keypoints.dim() < 2 || keypoints.size(-1) != 2) {
    throw InputError("DihedralTransformKeypointsBatch: keypoints must be [B, ..., 2]");
  }
  const int64_t batch = keypoints.size(0);
  at::Tensor ids =
      CheckIds(transform_ids, batch, keypoints.device(), "DihedralTransformKeypointsBatch");
  // Every D4 element is a signed permutation of (x, y): x' = a·x + b·y, y' = c·x + d·y.
  // Row t of `matrices` holds (a, b, c, d) of T_t, read off DihedralTransformKeypoints.
  at::Tensor basis = at::eye(2, keypoints.options());  // points (1, 0) and (0, 1)
  std::vector<at::Tensor> rows;
  for (int t = 0; t < kDihedralCount; ++t) {
    rows.push_back(DihedralTransformKeypoints(basis, t).t().reshape({2, 2}));
  }
  at::Tensor matrices = at::stack(rows).index_select(0, ids);  // [B, 2, 2], out = A · in
  std::vector<int64_t> view(keypoints.dim() + 1, 1);
  view[0] = batch;
  view[view.size() - 2] = 2;
  view[view.size() - 1] = 2;
  at::Tensor a = matrices.view(view);  // [B, 1, …, 1, 2, 2]
  return (a * keypoints.unsqueeze(-2)).sum(-1);
}

at::Tensor DihedralInverseIds(const at::Tensor& transform_ids) {
  if (!transform_ids.defined() || transform_ids.dim() != 1) {
    throw InputError("DihedralInverseIds: transform_ids must be [B]");
  }
  return InverseIds(
      CheckIds(transform_ids, transform_ids.size(0), transform_ids.device(), "DihedralInverseIds"));
}

at::Tensor ApplyDihedralAugmented(const std::function<at::Tensor(const at::Tensor&)>& network,
                                  const at::Tensor& images, const at::Tensor& transform_ids) {
  if (!transform_ids.defined()) return network(images);
  CheckBatchImages(images, "ApplyDihedralAugmented");
  at::Tensor ids =
      CheckIds(transform_ids, images.size(0), images.device(), "ApplyDihedralAugmented");
  at::Tensor maps = network(GatherFrames(images, ids));
  if (!maps.defined() || maps.dim() < 3 || maps.size(0) != images.size(0) ||
      maps.size(-1) != images.size(-1) || maps.size(-2) != images.size(-2)) {
    throw InputError(
        "ApplyDihedralAugmented: the network must return maps [B, K, H, W] with "
        "the images' B, H and W");
  }
  return GatherFrames(maps, InverseIds(ids));
}

at::Tensor RandomDihedralIds(int64_t count, const at::Device& device,
                             std::optional<at::Generator> generator) {
  if (count < 0) {
    throw InputError("RandomDihedralIds: count must be ≥ 0, got " + std::to_string(count));
  }
  const auto options = at::TensorOptions().dtype(at::kLong).device(device);
  if (generator.has_value()) return at::randint(kDihedralCount, {count}, *generator, options);
  return at::randint(kDihedralCount, {count}, options);
}

}  // namespace keycld
