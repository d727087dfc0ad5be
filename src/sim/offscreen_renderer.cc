#include "keycld/sim/offscreen_renderer.h"

#include <cstring>
#include <string>

#include "keycld/util/error.h"

namespace keycld {

OffscreenRenderer::OffscreenRenderer(Environment& env, GlContext& gl, int size)
    : gl_(gl), size_(size) {
  if (size < 2 || size > 4096) {
    throw InputError("image size must be in [2, 4096], got " + std::to_string(size));
  }
  mjModel* m = env.model();
  m->vis.global.offwidth = std::max(m->vis.global.offwidth, size);
  m->vis.global.offheight = std::max(m->vis.global.offheight, size);
  mjv_defaultScene(&scene_);
  mjv_defaultCamera(&camera_);
  mjv_defaultOption(&option_);
  mjr_defaultContext(&context_);
  mjv_makeScene(m, &scene_, 1000);
  mjr_makeContext(m, &context_, mjFONTSCALE_50);
  if (!context_.offFBO) {
    mjr_freeContext(&context_);
    mjv_freeScene(&scene_);
    throw GlError("MuJoCo could not create its offscreen framebuffer on " + gl.info().platform);
  }
  camera_.type = mjCAMERA_FIXED;
  camera_.fixedcamid = mj_name2id(m, mjOBJ_CAMERA, "fixed");
  flip_.resize(size_t(size) * size * 3);
}

OffscreenRenderer::~OffscreenRenderer() {
  mjr_freeContext(&context_);
  mjv_freeScene(&scene_);
}

void OffscreenRenderer::Render(const Environment& env, std::span<uint8_t> rgb) {
  const size_t n = size_t(size_) * size_ * 3;
  if (rgb.size() != n) {
    throw InputError("OffscreenRenderer::Render: buffer holds " + std::to_string(rgb.size()) +
                     " bytes, expected " + std::to_string(n));
  }
  mjrRect viewport = {0, 0, size_, size_};
  mjv_updateScene(env.model(), const_cast<mjData*>(env.data()), &option_, nullptr, &camera_,
                  mjCAT_ALL, &scene_);
  // The bound framebuffer is shared GL state: select ours before every render.
  mjr_setBuffer(mjFB_OFFSCREEN, &context_);
  mjr_render(viewport, &scene_, &context_);
  mjr_readPixels(flip_.data(), nullptr, viewport, &context_);
  // OpenGL returns the bottom row first; images are stored top row first.
  const size_t row = size_t(size_) * 3;
  for (int y = 0; y < size_; ++y) {
    std::memcpy(rgb.data() + y * row, flip_.data() + (size_ - 1 - y) * row, row);
  }
}

}  // namespace keycld
