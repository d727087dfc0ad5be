// Headless OpenGL contexts for MuJoCo rendering: EGL (Mesa's surfaceless platform on a CPU
// machine, the NVIDIA driver through EGL devices on a GPU machine) or OSMesa.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "keycld/util/names.h"

namespace keycld {

enum class GlBackend { kAuto, kEgl, kOsmesa };
template <>
struct NameTable<GlBackend> {
  static constexpr const char* kWhat = "GL backend";
  static constexpr std::pair<GlBackend, const char*> kEntries[] = {
      {GlBackend::kAuto, "auto"}, {GlBackend::kEgl, "egl"}, {GlBackend::kOsmesa, "osmesa"}};
};

/// Parses "auto", "egl" or "osmesa". Throws InputError otherwise.
GlBackend ParseGlBackend(const std::string& name);
std::string GlBackendName(GlBackend backend);

/// What a created context reports about itself (glGetString).
struct GlInfo {
  GlBackend backend = GlBackend::kAuto;
  std::string platform;  // e.g. "EGL device 0", "EGL surfaceless (Mesa)", "OSMesa"
  std::string vendor, renderer, version;
};

/// One OpenGL context, current on the thread that created it (call MakeCurrent() to move it
/// to another thread). MuJoCo renders into its own offscreen framebuffer object, so the
/// context needs no window and no default framebuffer of any size.
class GlContext {
 public:
  virtual ~GlContext() = default;
  virtual void MakeCurrent() = 0;
  virtual void ReleaseCurrent() = 0;
  const GlInfo& info() const { return info_; }

  /// Creates a context with `backend`; kAuto tries EGL, then OSMesa. The environment
  /// variable KEYCLD_GL (egl|osmesa) overrides kAuto. Every failed attempt is described in
  /// the exception's message (GlError) and, when a later backend succeeds, in `attempts`.
  static std::unique_ptr<GlContext> Create(GlBackend backend,
                                           std::vector<std::string>* attempts = nullptr);

 protected:
  GlInfo info_;
};

}  // namespace keycld
