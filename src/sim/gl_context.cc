#include "keycld/sim/gl_context.h"

#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <GL/gl.h>
#include <GL/osmesa.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "keycld/util/error.h"

namespace keycld {

GlBackend ParseGlBackend(const std::string& name) { return ParseName<GlBackend>(name); }

std::string GlBackendName(GlBackend backend) { return NameOf(backend); }

namespace {

// The GL libraries are opened at run time, so a machine that lacks one backend still runs
// with the other, and the error says which library was missing.
void* OpenLibrary(const std::vector<const char*>& names, std::string* why) {
  for (const char* name : names) {
    if (void* h = ::dlopen(name, RTLD_NOW | RTLD_GLOBAL)) return h;
    *why += std::string(::dlerror()) + "; ";
  }
  return nullptr;
}

template <typename F>
F Symbol(void* lib, const char* name) {
  return reinterpret_cast<F>(::dlsym(lib, name));
}

using GetStringFn = const GLubyte* (*)(GLenum);

void FillStrings(GlInfo* info, GetStringFn get_string) {
  auto str = [&](GLenum e) {
    const GLubyte* s = get_string ? get_string(e) : nullptr;
    return s ? std::string(reinterpret_cast<const char*>(s)) : std::string("?");
  };
  info->vendor = str(GL_VENDOR);
  info->renderer = str(GL_RENDERER);
  info->version = str(GL_VERSION);
}

// ---------------------------------------------------------------- EGL
struct EglApi {
  void* lib = nullptr;
  PFNEGLGETPROCADDRESSPROC GetProcAddress;
  PFNEGLGETERRORPROC GetError;
  PFNEGLQUERYSTRINGPROC QueryString;
  PFNEGLINITIALIZEPROC Initialize;
  PFNEGLTERMINATEPROC Terminate;
  PFNEGLGETDISPLAYPROC GetDisplay;
  PFNEGLCHOOSECONFIGPROC ChooseConfig;
  PFNEGLBINDAPIPROC BindAPI;
  PFNEGLCREATECONTEXTPROC CreateContext;
  PFNEGLDESTROYCONTEXTPROC DestroyContext;
  PFNEGLMAKECURRENTPROC MakeCurrent;
  PFNEGLQUERYDEVICESEXTPROC QueryDevicesEXT = nullptr;
  PFNEGLGETPLATFORMDISPLAYEXTPROC GetPlatformDisplayEXT = nullptr;
};

EglApi g_egl;
std::string g_egl_error;
std::once_flag g_egl_once;

const EglApi* LoadEgl(std::string* why) {
  EglApi& api = g_egl;
  std::string& load_error = g_egl_error;
  std::call_once(g_egl_once, [] {
    EglApi& api = g_egl;
    std::string& load_error = g_egl_error;
    std::string err;
    api.lib = OpenLibrary({"libEGL.so.1", "libEGL.so"}, &err);
    if (!api.lib) {
      load_error = "libEGL not found (" + err + "install libegl1 and libegl-mesa0)";
      return;
    }
    api.GetProcAddress = Symbol<PFNEGLGETPROCADDRESSPROC>(api.lib, "eglGetProcAddress");
    api.GetError = Symbol<PFNEGLGETERRORPROC>(api.lib, "eglGetError");
    api.QueryString = Symbol<PFNEGLQUERYSTRINGPROC>(api.lib, "eglQueryString");
    api.Initialize = Symbol<PFNEGLINITIALIZEPROC>(api.lib, "eglInitialize");
    api.Terminate = Symbol<PFNEGLTERMINATEPROC>(api.lib, "eglTerminate");
    api.GetDisplay = Symbol<PFNEGLGETDISPLAYPROC>(api.lib, "eglGetDisplay");
    api.ChooseConfig = Symbol<PFNEGLCHOOSECONFIGPROC>(api.lib, "eglChooseConfig");
    api.BindAPI = Symbol<PFNEGLBINDAPIPROC>(api.lib, "eglBindAPI");
    api.CreateContext = Symbol<PFNEGLCREATECONTEXTPROC>(api.lib, "eglCreateContext");
    api.DestroyContext = Symbol<PFNEGLDESTROYCONTEXTPROC>(api.lib, "eglDestroyContext");
    api.MakeCurrent = Symbol<PFNEGLMAKECURRENTPROC>(api.lib, "eglMakeCurrent");
    if (!api.GetProcAddress || !api.Initialize || !api.CreateContext || !api.MakeCurrent) {
      load_error = "libEGL lacks core EGL 1.4 entry points";
      api.lib = nullptr;
      return;
    }
    api.QueryDevicesEXT =
        reinterpret_cast<PFNEGLQUERYDEVICESEXTPROC>(api.GetProcAddress("eglQueryDevicesEXT"));
    api.GetPlatformDisplayEXT = reinterpret_cast<PFNEGLGETPLATFORMDISPLAYEXTPROC>(
        api.GetProcAddress("eglGetPlatformDisplayEXT"));
  });
  if (!api.lib) {
    *why = load_error;
    return nullptr;
  }
  return &api;
}

std::string EglErrorString(const EglApi* egl) {
  std::ostringstream s;
  s << "EGL error 0x" << std::hex << egl->GetError();
  return s.str();
}

class EglContext : public GlContext {
 public:
  EglContext(const EglApi* egl, EGLDisplay display, EGLContext context, std::string platform)
      : egl_(egl), display_(display), context_(context) {
    info_.backend = GlBackend::kEgl;
    info_.platform = std::move(platform);
    MakeCurrent();
    FillStrings(&info_, reinterpret_cast<GetStringFn>(egl_->GetProcAddress("glGetString")));
  }
  ~EglContext() override {
    egl_->MakeCurrent(display_, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    egl_->DestroyContext(display_, context_);
  }
  void MakeCurrent() override {
    if (!egl_->MakeCurrent(display_, EGL_NO_SURFACE, EGL_NO_SURFACE, context_)) {
      throw GlError("eglMakeCurrent failed: " + EglErrorString(egl_));
    }
  }
  void ReleaseCurrent() override {
    egl_->MakeCurrent(display_, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
  }

 private:
  const EglApi* egl_;
  EGLDisplay display_;
  EGLContext context_;
};

// Initialises `display` and creates a desktop-GL context on it; nullptr and `why` on failure.
EGLContext TryEglContext(const EglApi* egl, EGLDisplay display, std::string* why) {
  if (display == EGL_NO_DISPLAY) {
    *why = "no display";
    return EGL_NO_CONTEXT;
  }
  EGLint major = 0, minor = 0;
  if (!egl->Initialize(display, &major, &minor)) {
    *why = "eglInitialize: " + EglErrorString(egl);
    return EGL_NO_CONTEXT;
  }
  const char* ext = egl->QueryString(display, EGL_EXTENSIONS);
  if (!ext || std::string(ext).find("EGL_KHR_surfaceless_context") == std::string::npos) {
    *why = "EGL_KHR_surfaceless_context not supported";
    return EGL_NO_CONTEXT;
  }
  const EGLint config_attribs[] = {EGL_RED_SIZE,
                                   8,
                                   EGL_GREEN_SIZE,
                                   8,
                                   EGL_BLUE_SIZE,
                                   8,
                                   EGL_ALPHA_SIZE,
                                   8,
                                   EGL_DEPTH_SIZE,
                                   24,
                                   EGL_STENCIL_SIZE,
                                   8,
                                   EGL_RENDERABLE_TYPE,
                                   EGL_OPENGL_BIT,
                                   EGL_NONE};
  EGLConfig config;
  EGLint count = 0;
  if (!egl->ChooseConfig(display, config_attribs, &config, 1, &count) || count < 1) {
    // Surfaceless displays may expose no RGBA8/depth configs; MuJoCo needs none.
    config = nullptr;
  }
  if (!egl->BindAPI(EGL_OPENGL_API)) {
    *why = "eglBindAPI(EGL_OPENGL_API): " + EglErrorString(egl);
    return EGL_NO_CONTEXT;
  }
  EGLContext ctx = egl->CreateContext(display, config, EGL_NO_CONTEXT, nullptr);
  if (ctx == EGL_NO_CONTEXT) {
    *why = "eglCreateContext: " + EglErrorString(egl);
    return EGL_NO_CONTEXT;
  }
  return ctx;
}

std::unique_ptr<GlContext> CreateEgl(std::vector<std::string>* tried) {
  std::string why;
  const EglApi* egl = LoadEgl(&why);
  if (!egl) {
    tried->push_back("EGL: " + why);
    return nullptr;
  }
  // 1. EGL devices (the NVIDIA driver on a GPU machine; Mesa lists a software device too).
  if (egl->QueryDevicesEXT && egl->GetPlatformDisplayEXT) {
    EGLDeviceEXT devices[16];
    EGLint n = 0;
    if (egl->QueryDevicesEXT(16, devices, &n)) {
      for (EGLint i = 0; i < n; ++i) {
        EGLDisplay d = egl->GetPlatformDisplayEXT(EGL_PLATFORM_DEVICE_EXT, devices[i], nullptr);
        if (EGLContext c = TryEglContext(egl, d, &why)) {
          return std::make_unique<EglContext>(egl, d, c, "EGL device " + std::to_string(i));
        }
        tried->push_back("EGL device " + std::to_string(i) + ": " + why);
      }
    }
  }
  // 2. Mesa's surfaceless platform (a CPU machine with no display server).
  if (egl->GetPlatformDisplayEXT) {
    EGLDisplay d =
        egl->GetPlatformDisplayEXT(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, nullptr);
    if (EGLContext c = TryEglContext(egl, d, &why)) {
      return std::make_unique<EglContext>(egl, d, c, "EGL surfaceless (Mesa)");
    }
    tried->push_back("EGL surfaceless: " + why);
  }
  // 3. The default display.
  EGLDisplay d = egl->GetDisplay(EGL_DEFAULT_DISPLAY);
  if (EGLContext c = TryEglContext(egl, d, &why)) {
    return std::make_unique<EglContext>(egl, d, c, "EGL default display");
  }
  tried->push_back("EGL default display: " + why);
  // Unload libEGL again: MuJoCo's GL loader takes the first GL library it finds loaded in the
  // process, and an EGL without a usable display would then hide OSMesa from it.
  ::dlclose(g_egl.lib);
  g_egl.lib = nullptr;
  g_egl_error = "EGL was found unusable earlier in this process";
  return nullptr;
}

// ---------------------------------------------------------------- OSMesa
struct OsmesaApi {
  void* lib = nullptr;
  OSMesaContext (*CreateContextExt)(GLenum, GLint, GLint, GLint, OSMesaContext);
  void (*DestroyContext)(OSMesaContext);
  GLboolean (*MakeCurrent)(OSMesaContext, void*, GLenum, GLsizei, GLsizei);
  OSMESAproc (*GetProcAddress)(const char*);
};

const OsmesaApi* LoadOsmesa(std::string* why) {
  static std::once_flag once;
  static OsmesaApi api;
  static std::string load_error;
  std::call_once(once, [] {
    std::string err;
    api.lib = OpenLibrary({"libOSMesa.so.8", "libOSMesa.so.6", "libOSMesa.so"}, &err);
    if (!api.lib) {
      load_error = "libOSMesa not found (" + err + "install libosmesa6)";
      return;
    }
    api.CreateContextExt =
        Symbol<decltype(api.CreateContextExt)>(api.lib, "OSMesaCreateContextExt");
    api.DestroyContext = Symbol<decltype(api.DestroyContext)>(api.lib, "OSMesaDestroyContext");
    api.MakeCurrent = Symbol<decltype(api.MakeCurrent)>(api.lib, "OSMesaMakeCurrent");
    api.GetProcAddress = Symbol<decltype(api.GetProcAddress)>(api.lib, "OSMesaGetProcAddress");
    if (!api.CreateContextExt || !api.MakeCurrent || !api.GetProcAddress) {
      load_error = "libOSMesa lacks OSMesaCreateContextExt/OSMesaMakeCurrent";
      api.lib = nullptr;
    }
  });
  if (!api.lib) {
    *why = load_error;
    return nullptr;
  }
  return &api;
}

class OsmesaContext : public GlContext {
 public:
  OsmesaContext(const OsmesaApi* api, OSMesaContext ctx) : api_(api), ctx_(ctx) {
    info_.backend = GlBackend::kOsmesa;
    info_.platform = "OSMesa";
    MakeCurrent();
    FillStrings(&info_, reinterpret_cast<GetStringFn>(api_->GetProcAddress("glGetString")));
  }
  ~OsmesaContext() override { api_->DestroyContext(ctx_); }
  void MakeCurrent() override {
    // The default framebuffer is a placeholder: MuJoCo draws into its own FBO.
    if (!api_->MakeCurrent(ctx_, buffer_, GL_UNSIGNED_BYTE, kSize, kSize)) {
      throw GlError("OSMesaMakeCurrent failed");
    }
  }
  void ReleaseCurrent() override {}

 private:
  static constexpr int kSize = 4;
  const OsmesaApi* api_;
  OSMesaContext ctx_;
  unsigned char buffer_[kSize * kSize * 4] = {};
};

std::unique_ptr<GlContext> CreateOsmesa(std::vector<std::string>* tried) {
  std::string why;
  const OsmesaApi* api = LoadOsmesa(&why);
  if (!api) {
    tried->push_back("OSMesa: " + why);
    return nullptr;
  }
  OSMesaContext ctx = api->CreateContextExt(OSMESA_RGBA, 24, 8, 0, nullptr);
  if (!ctx) {
    tried->push_back("OSMesa: OSMesaCreateContextExt returned no context");
    return nullptr;
  }
  return std::make_unique<OsmesaContext>(api, ctx);
}

}  // namespace

std::unique_ptr<GlContext> GlContext::Create(GlBackend backend,
                                             std::vector<std::string>* attempts) {
  if (backend == GlBackend::kAuto) {
    if (const char* env = std::getenv("KEYCLD_GL"); env && *env) {
      try {
        backend = ParseGlBackend(env);
      } catch (const InputError& e) {
        throw InputError(std::string("environment variable KEYCLD_GL: ") + e.what());
      }
    }
  }
  std::vector<std::string> tried;
  std::unique_ptr<GlContext> ctx;
  if (backend == GlBackend::kAuto || backend == GlBackend::kEgl) ctx = CreateEgl(&tried);
  if (!ctx && (backend == GlBackend::kAuto || backend == GlBackend::kOsmesa)) {
    ctx = CreateOsmesa(&tried);
  }
  if (attempts) *attempts = tried;
  if (!ctx) {
    std::string msg =
        "no usable OpenGL for headless rendering (--gl " + GlBackendName(backend) + "); tried: ";
    for (size_t i = 0; i < tried.size(); ++i) msg += (i ? "; " : "") + tried[i];
    throw GlError(msg);
  }
  return ctx;
}

}  // namespace keycld
