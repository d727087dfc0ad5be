// Headless rendering (EGL / OSMesa) of the benchmark systems.
#include <gtest/gtest.h>

#include <cmath>

#include "keycld/sim/gl_context.h"
#include "keycld/sim/offscreen_renderer.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

std::vector<uint8_t> RenderState(Environment& env, GlContext& gl, int size,
                                 std::vector<double> qpos) {
  env.Reset(qpos, std::vector<double>(env.nv(), 0.0));
  OffscreenRenderer r(env, gl, size);
  std::vector<uint8_t> rgb(size_t(size) * size * 3);
  r.Render(env, rgb);
  return rgb;
}

// Pixel (row, col) nearest to normalized image coordinates (x right, y up; §2).
std::pair<int, int> Pixel(const std::array<double, 2>& p, int size) {
  int col = int(std::lround((p[0] + 1) / 2 * (size - 1)));
  int row = int(std::lround((1 - p[1]) / 2 * (size - 1)));
  return {row, col};
}

TEST(SimRender, FramesAreNotBlankAndRepeatable) {
  auto gl = GlContext::Create(GlBackend::kAuto);
  for (EnvName name : {EnvName::kPendulum, EnvName::kCartpole, EnvName::kAcrobot}) {
    Environment env(name);
    auto a = RenderState(env, *gl, 64, std::vector<double>(env.nq(), 0.3));
    auto b = RenderState(env, *gl, 64, std::vector<double>(env.nq(), 0.3));
    EXPECT_EQ(a, b) << EnvNameString(name) << ": two renders of one state differ";
    double mean = 0, var = 0;
    for (uint8_t v : a) mean += v;
    mean /= double(a.size());
    for (uint8_t v : a) var += (v - mean) * (v - mean);
    EXPECT_GT(std::sqrt(var / double(a.size())), 10.0) << EnvNameString(name) << " is blank";
  }
}

TEST(SimRender, TheBobIsDrawnWhereTheCameraProjectsIt) {
  auto gl = GlContext::Create(GlBackend::kAuto);
  Environment env(EnvName::kPendulum);
  const int size = 64;
  auto right = RenderState(env, *gl, size, {M_PI / 2});
  auto tip_right = Pixel(env.KeypointImagePositions(size)[0], size);
  auto left = RenderState(env, *gl, size, {-M_PI / 2});
  auto tip_left = Pixel(env.KeypointImagePositions(size)[0], size);
  EXPECT_GT(tip_right.second, size / 2 + 10);
  EXPECT_LT(tip_left.second, size / 2 - 10);
  EXPECT_NEAR(tip_right.first, (size - 1) / 2.0, 1.0);
  auto at = [&](const std::vector<uint8_t>& img, std::pair<int, int> rc, int c) {
    return int(img[(size_t(rc.first) * size + rc.second) * 3 + c]);
  };
  // The bob ("effector" 0.7, 0.4, 0.2) is orange: red well above blue. The background there
  // (blue sky) is the opposite.
  EXPECT_GT(at(right, tip_right, 0), at(right, tip_right, 2) + 40);
  EXPECT_GT(at(left, tip_left, 0), at(left, tip_left, 2) + 40);
  EXPECT_LT(at(left, tip_right, 0), at(left, tip_right, 2));
  EXPECT_LT(at(right, tip_left, 0), at(right, tip_left, 2));
}

TEST(SimRender, AFrameAfterAStepShowsTheNewState) {
  auto gl = GlContext::Create(GlBackend::kAuto);
  Environment env(EnvName::kCartpole);
  OffscreenRenderer r(env, *gl, 32);
  env.Reset(std::vector<double>{0.0, 1.0}, std::vector<double>{3.0, 20.0});
  for (int t = 0; t < 3; ++t) env.Step();
  std::vector<uint8_t> stepped(32 * 32 * 3), reset(32 * 32 * 3);
  r.Render(env, stepped);
  env.Reset(env.qpos(), env.qvel());
  r.Render(env, reset);
  EXPECT_EQ(stepped, reset);
}

TEST(SimRender, EglAndOsmesaAgree) {
  std::unique_ptr<GlContext> egl, osmesa;
  try {
    egl = GlContext::Create(GlBackend::kEgl);
    osmesa = GlContext::Create(GlBackend::kOsmesa);
  } catch (const GlError& e) {
    GTEST_SKIP() << "both backends are needed: " << e.what();
  }
  Environment env(EnvName::kAcrobot);
  egl->MakeCurrent();
  auto a = RenderState(env, *egl, 64, {0.7, -1.2});
  osmesa->MakeCurrent();
  auto b = RenderState(env, *osmesa, 64, {0.7, -1.2});
  double mse = 0;
  for (size_t i = 0; i < a.size(); ++i) mse += (a[i] - b[i]) * (a[i] - b[i]);
  mse /= double(a.size()) * 255.0 * 255.0;
  // Same rasterizer behind both: near-identical frames (per-pixel MSE on [0, 1]).
  EXPECT_LT(mse, 1e-4) << "EGL (" << egl->info().renderer << ") vs OSMesa ("
                       << osmesa->info().renderer << ")";
}

TEST(SimRender, BadSizesAndBuffersAreRejected) {
  auto gl = GlContext::Create(GlBackend::kAuto);
  Environment env(EnvName::kPendulum);
  EXPECT_THROW(OffscreenRenderer(env, *gl, 1), InputError);
  OffscreenRenderer r(env, *gl, 16);
  std::vector<uint8_t> small(10);
  EXPECT_THROW(r.Render(env, small), InputError);
  EXPECT_THROW(ParseGlBackend("vulkan"), InputError);
}

}  // namespace
}  // namespace keycld
