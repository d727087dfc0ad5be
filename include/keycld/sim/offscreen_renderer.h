// Renders the fixed camera of an Environment into a square RGB image, headless.
#pragma once

#include <mujoco/mujoco.h>

#include <cstdint>
#include <span>

#include "keycld/sim/environment.h"
#include "keycld/sim/gl_context.h"

namespace keycld {

/// A MuJoCo render context bound to one GlContext. The GL context must be current on the
/// calling thread for construction, Render and destruction. Images are uint8 RGB,
/// [size, size, 3], row 0 = top of the image (docs/method.md §2).
class OffscreenRenderer {
 public:
  /// Enlarges the model's offscreen buffer to at least size×size. Throws InputError if
  /// size < 2 or size > 4096.
  OffscreenRenderer(Environment& env, GlContext& gl, int size);
  ~OffscreenRenderer();
  OffscreenRenderer(const OffscreenRenderer&) = delete;
  OffscreenRenderer& operator=(const OffscreenRenderer&) = delete;

  int size() const { return size_; }
  /// Renders the current state of `env` (same model as at construction) into `rgb`
  /// [size·size·3]. Throws InputError on a wrong buffer size.
  void Render(const Environment& env, std::span<uint8_t> rgb);

 private:
  GlContext& gl_;
  int size_;
  mjvScene scene_;
  mjvCamera camera_;
  mjvOption option_;
  mjrContext context_;
  std::vector<uint8_t> flip_;
};

}  // namespace keycld
