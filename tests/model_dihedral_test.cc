// Tests of the dihedral augmentation (KeyCLD §6): group structure, image/keypoint agreement
// and the equivariance of the augmented estimator.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <vector>

#include "keycld/model/dihedral.h"
#include "keycld/model/keypoint_estimator.h"
#include "keycld/model/keypoints.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

at::Tensor Ids(std::vector<int64_t> ids) { return at::tensor(ids, at::kLong); }

TEST(ModelDihedral, TransformThenInverseIsIdentity) {
  at::manual_seed(2);
  at::Tensor images = at::rand({2, 3, 6, 6});
  for (int t = 0; t < kDihedralCount; ++t) {
    EXPECT_TRUE(at::equal(DihedralInverseTransform(DihedralTransform(images, t), t), images))
        << "t=" << t;
    EXPECT_TRUE(at::equal(DihedralTransform(DihedralInverseTransform(images, t), t), images))
        << "t=" << t;
    EXPECT_EQ(DihedralCompose(t, DihedralInverse(t)), 0);
    EXPECT_EQ(DihedralCompose(DihedralInverse(t), t), 0);
  }
  // Identity, and the 8 transforms are distinct on a generic image.
  EXPECT_TRUE(at::equal(DihedralTransform(images, 0), images));
  for (int a = 0; a < kDihedralCount; ++a) {
    for (int b = a + 1; b < kDihedralCount; ++b) {
      EXPECT_FALSE(at::equal(DihedralTransform(images, a), DihedralTransform(images, b)));
    }
  }
}

TEST(ModelDihedral, CompositionTableMatchesImages) {
  at::manual_seed(3);
  at::Tensor images = at::rand({1, 2, 4, 4});
  for (int a = 0; a < kDihedralCount; ++a) {
    for (int b = 0; b < kDihedralCount; ++b) {
      const int c = DihedralCompose(a, b);
      EXPECT_TRUE(at::equal(DihedralTransform(DihedralTransform(images, b), a),
                            DihedralTransform(images, c)))
          << a << " ∘ " << b << " = " << c;
    }
  }
  // A few entries by hand: two quarter turns are a half turn; four are the identity; a
  // mirror is an involution; mirror then quarter turn differs from quarter turn then mirror.
  EXPECT_EQ(DihedralCompose(1, 1), 2);
  EXPECT_EQ(DihedralCompose(3, 1), 0);
  EXPECT_EQ(DihedralCompose(4, 4), 0);
  EXPECT_EQ(DihedralCompose(1, 4), 5);
  EXPECT_EQ(DihedralCompose(4, 1), 7);
  EXPECT_EQ(DihedralInverse(1), 3);
  EXPECT_EQ(DihedralInverse(5), 5);
  EXPECT_THROW(DihedralCompose(8, 0), InputError);
  EXPECT_THROW(DihedralTransform(images, -1), InputError);
  EXPECT_THROW(DihedralTransform(at::zeros({1, 1, 4, 6}), 1), InputError);
}

TEST(ModelDihedral, KeypointMappingFollowsImageContent) {
  const int64_t n = 8;
  const std::vector<std::pair<int64_t, int64_t>> pixels = {{0, 0}, {0, 5}, {2, 7}, {6, 3}};
  for (const auto& [row, col] : pixels) {
    at::Tensor image = at::zeros({1, 1, n, n});
    image[0][0][row][col] = 1.0;
    const at::Tensor where = SpatialSoftmax(image * 1e4).keypoints.view({2});
    for (int t = 0; t < kDihedralCount; ++t) {
      at::Tensor moved = DihedralTransform(image, t);
      const int64_t flat = moved.flatten().argmax().item<int64_t>();
      const at::Tensor found = SpatialSoftmax(moved * 1e4).keypoints.view({2});
      const at::Tensor mapped = DihedralTransformKeypoints(where, t);
      EXPECT_TRUE(at::equal(mapped, found))
          << "pixel (" << row << ", " << col << ") t=" << t << " moved to flat " << flat;
    }
  }
}

TEST(ModelDihedral, BatchTransformsEachFrameByItsOwnId) {
  at::manual_seed(4);
  at::Tensor images = at::rand({8, 3, 8, 8});
  at::Tensor ids = Ids({3, 0, 5, 7, 1, 4, 2, 6});
  at::Tensor out = DihedralTransformBatch(images, ids);
  at::Tensor back = DihedralInverseTransformBatch(out, ids);
  EXPECT_TRUE(at::equal(back, images));
  at::Tensor keypoints = at::rand({8, 2, 2}) * 2 - 1;
  at::Tensor moved = DihedralTransformKeypointsBatch(keypoints, ids);
  at::Tensor inverse_ids = DihedralInverseIds(ids);
  for (int64_t b = 0; b < 8; ++b) {
    const int t = static_cast<int>(ids[b].item<int64_t>());
    EXPECT_TRUE(at::equal(out[b], DihedralTransform(images[b], t))) << "b=" << b;
    EXPECT_TRUE(at::equal(moved[b], DihedralTransformKeypoints(keypoints[b], t))) << "b=" << b;
    EXPECT_EQ(inverse_ids[b].item<int64_t>(), DihedralInverse(t));
  }
  EXPECT_THROW(DihedralTransformBatch(images, Ids({0, 1})), InputError);
  EXPECT_THROW(DihedralTransformBatch(images, Ids({0, 1, 2, 3, 4, 5, 6, 8})), InputError);
  at::Tensor random = RandomDihedralIds(1000, at::kCPU);
  EXPECT_GE(random.min().item<int64_t>(), 0);
  EXPECT_LT(random.max().item<int64_t>(), 8);
  EXPECT_EQ(at::bincount(random).numel(), 8);
  // Reproducible from one seed.
  at::Generator g1 = at::make_generator<at::CPUGeneratorImpl>(42);
  at::Generator g2 = at::make_generator<at::CPUGeneratorImpl>(42);
  EXPECT_TRUE(at::equal(RandomDihedralIds(64, at::kCPU, g1), RandomDihedralIds(64, at::kCPU, g2)));
}

// An exactly equivariant "estimator": a 1×1 convolution mixes channels per pixel only.
at::Tensor PointwiseLogits(const at::Tensor& images) {
  at::Tensor weight = at::tensor({3.0f, -2.0f, 1.0f, 0.5f, 4.0f, -1.0f}).view({2, 3, 1, 1});
  return at::conv2d(images, weight);
}

TEST(ModelDihedral, AugmentedEquivariantEstimatorRecoversOriginalKeypoints) {
  at::manual_seed(5);
  at::Tensor image = at::rand({1, 3, 8, 8});
  const SpatialSoftmaxResult original = SpatialSoftmax(PointwiseLogits(image));
  // The same frame under all 8 augmentations: after the inverse transform of the logits the
  // keypoints equal those of the original frame.
  at::Tensor frames = image.expand({8, 3, 8, 8});
  at::Tensor ids = at::arange(8, at::kLong);
  const SpatialSoftmaxResult augmented =
      SpatialSoftmax(ApplyDihedralAugmented(PointwiseLogits, frames, ids));
  for (int64_t b = 0; b < 8; ++b) {
    EXPECT_TRUE(at::allclose(augmented.keypoints[b], original.keypoints[0], 0, 1e-6)) << "t=" << b;
  }
  // Without the inverse transform, the keypoints of a transformed frame are the transformed
  // keypoints of the original (the network is equivariant).
  for (int t = 0; t < kDihedralCount; ++t) {
    const SpatialSoftmaxResult moved = SpatialSoftmax(PointwiseLogits(DihedralTransform(image, t)));
    EXPECT_TRUE(
        at::allclose(moved.keypoints, DihedralTransformKeypoints(original.keypoints, t), 0, 1e-6))
        << "t=" << t;
  }
}

TEST(ModelDihedral, AugmentedEstimatorMapsTransformedFramesBack) {
  // For any network, estimating T_a(image) with transform t equals T_a of estimating image
  // with transform t ∘ a: logits(T_a I, t) = T_a logits(I, t∘a). So augmented frames'
  // keypoints map back to the original frame's keypoints exactly.
  at::manual_seed(6);
  KeypointEstimator estimator(2, 8);
  estimator->eval();
  at::Tensor image = at::rand({1, 3, 16, 16});
  std::vector<at::Tensor> frames;
  std::vector<int64_t> ids, composed;
  for (int a = 0; a < kDihedralCount; ++a) {
    const int t = (3 * a + 1) % kDihedralCount;  // an arbitrary augmentation per frame
    frames.push_back(DihedralTransform(image, a));
    ids.push_back(t);
    composed.push_back(DihedralCompose(t, a));
  }
  at::Tensor a_ids = at::arange(8, at::kLong);
  at::NoGradGuard no_grad;
  const SpatialSoftmaxResult of_frames = estimator->Estimate(at::cat(frames), Ids(ids));
  const SpatialSoftmaxResult of_original =
      estimator->Estimate(image.expand({8, 3, 16, 16}), Ids(composed));
  at::Tensor mapped_back =
      DihedralTransformKeypointsBatch(of_frames.keypoints, DihedralInverseIds(a_ids));
  EXPECT_TRUE(at::allclose(mapped_back, of_original.keypoints, 0, 1e-5));
  EXPECT_TRUE(at::allclose(of_frames.probabilities,
                           DihedralTransformBatch(of_original.probabilities, a_ids), 0, 1e-6));
}

}  // namespace
}  // namespace keycld
