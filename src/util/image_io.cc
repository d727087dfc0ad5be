#include "keycld/util/image_io.h"

#include <fcntl.h>
#include <gif_lib.h>
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"

namespace keycld {

PngImage ReadPng(const std::filesystem::path& path) {
  if (!std::filesystem::is_regular_file(path)) {
    throw IoError("image not found: '" + path.string() + "'");
  }
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  if (!in.read(magic, 8)) {
    if (!in.is_open()) throw IoError("cannot read '" + path.string() + "'");
    throw FormatError("'" + path.string() + "' is not a PNG file (too short)");
  }
  static const unsigned char kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (std::memcmp(magic, kPngMagic, 8) != 0) {
    throw FormatError("'" + path.string() + "' is not a PNG file");
  }
  PngImage image;
  stbi_uc* data = stbi_load(path.c_str(), &image.width, &image.height, &image.channels, 0);
  if (!data) {
    throw FormatError("cannot decode PNG '" + path.string() + "': " + stbi_failure_reason());
  }
  image.pixels.assign(data, data + size_t(image.width) * image.height * image.channels);
  stbi_image_free(data);
  return image;
}

void WritePng(const std::filesystem::path& path, std::span<const uint8_t> rgb, int width,
              int height) {
  if (width <= 0 || height <= 0 || rgb.size() != size_t(width) * height * 3) {
    throw InputError("WritePng: buffer of " + std::to_string(rgb.size()) + " bytes is not " +
                     std::to_string(width) + "x" + std::to_string(height) + "x3");
  }
  // Encoded to memory, then written with checked write(2) calls (stb's file writer ignores
  // write errors, which on a full disk left a truncated PNG).
  std::string png;
  auto append = [](void* context, void* data, int n) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), size_t(n));
  };
  if (!stbi_write_png_to_func(append, &png, width, height, 3, rgb.data(), width * 3)) {
    throw IoError("cannot encode PNG '" + path.string() + "'");
  }
  WriteFileAtomically(path, png);
}

namespace {

// A 256-colour palette for a whole animation: the 16 most frequent exact colours of a sample of
// the frames (flat areas: backgrounds, markers, gaps) are kept exactly, the remaining 240 come
// from giflib's median cut of the sample. `lut` maps 5-bit-per-channel colours to the nearest
// palette entry.
struct Palette {
  std::vector<GifColorType> colors;  // 256
  std::vector<GifByteType> lut;      // 32768
};

Palette FitPalette(const std::vector<std::span<const uint8_t>>& frames, size_t pixels) {
  constexpr size_t kSample = size_t(1) << 18;
  constexpr int kExact = 16, kColors = 256;
  const size_t total = pixels * frames.size();
  const size_t stride = std::max<size_t>(1, total / kSample);
  std::vector<GifByteType> r, g, b;
  std::unordered_map<uint32_t, int> counts;
  for (size_t i = 0; i < total; i += stride) {
    const uint8_t* p = frames[i / pixels].data() + (i % pixels) * 3;
    r.push_back(p[0]);
    g.push_back(p[1]);
    b.push_back(p[2]);
    ++counts[(uint32_t(p[0]) << 16) | (uint32_t(p[1]) << 8) | p[2]];
  }
  std::vector<std::pair<int, uint32_t>> frequent;
  for (auto [colour, n] : counts) frequent.emplace_back(-n, colour);
  std::sort(frequent.begin(), frequent.end());
  Palette pal;
  for (int i = 0; i < kExact && i < int(frequent.size()); ++i) {
    uint32_t c = frequent[i].second;
    pal.colors.push_back({GifByteType(c >> 16), GifByteType(c >> 8), GifByteType(c)});
  }
  if (counts.size() > pal.colors.size()) {
    int size = kColors - int(pal.colors.size());
    std::vector<GifByteType> out(r.size());
    std::vector<GifColorType> cut(size);
    if (GifQuantizeBuffer(unsigned(r.size()), 1, &size, r.data(), g.data(), b.data(), out.data(),
                          cut.data()) == GIF_ERROR) {
      throw IoError("GIF palette: out of memory");
    }
    pal.colors.insert(pal.colors.end(), cut.begin(), cut.begin() + size);
  }
  const size_t used = pal.colors.size();
  pal.colors.resize(kColors, GifColorType{0, 0, 0});
  pal.lut.resize(32768);
  for (int q = 0; q < 32768; ++q) {
    const int qr = ((q >> 10) << 3) + 4, qg = (((q >> 5) & 31) << 3) + 4, qb = ((q & 31) << 3) + 4;
    int best = 0, best_d = INT32_MAX;
    for (size_t i = 0; i < used; ++i) {
      const int dr = qr - pal.colors[i].Red, dg = qg - pal.colors[i].Green,
                db = qb - pal.colors[i].Blue;
      const int d = dr * dr + dg * dg + db * db;
      if (d < best_d) best_d = d, best = int(i);
    }
    pal.lut[q] = GifByteType(best);
  }
  // Colours kept exactly map to themselves even where another entry is nearer to the bin centre.
  for (int i = 0; i < kExact && i < int(used) && i < int(frequent.size()); ++i) {
    const GifColorType& c = pal.colors[i];
    pal.lut[((c.Red >> 3) << 10) | ((c.Green >> 3) << 5) | (c.Blue >> 3)] = GifByteType(i);
  }
  return pal;
}

}  // namespace

struct GifWriter::Impl {
  std::filesystem::path path;
  int width = 0, height = 0, delay_cs = 0;
  Palette palette;
  std::unique_ptr<AtomicFile> file;
  int fd = -1;          // the temporary, written by Output
  int write_errno = 0;  // errno of the first failed write
  GifFileType* gif = nullptr;
  std::vector<GifByteType> index;
  int64_t frames = 0;

  [[noreturn]] void Fail(const std::string& what) {
    Close();
    if (write_errno != 0) throw IoError(WriteFailure(path, write_errno));
    throw IoError("cannot write GIF '" + path.string() + "': " + what);
  }
  void Close() {
    if (gif) {
      int err = 0;
      EGifCloseFile(gif, &err);
      gif = nullptr;
    }
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  // giflib's output function: every byte goes through a checked write(2).
  static int Output(GifFileType* gif, const GifByteType* data, int n) {
    Impl* m = static_cast<Impl*>(gif->UserData);
    if (m->write_errno != 0) return 0;
    m->write_errno = WriteAll(m->fd, std::string_view(reinterpret_cast<const char*>(data), n));
    return m->write_errno == 0 ? n : 0;
  }
};

GifWriter::GifWriter(const std::filesystem::path& path, int width, int height, int delay_cs,
                     const std::vector<std::span<const uint8_t>>& palette_sample)
    : impl_(std::make_unique<Impl>()) {
  if (width < 1 || height < 1 || width > 65535 || height > 65535) {
    throw InputError("GIF '" + path.string() + "': size " + std::to_string(width) + "x" +
                     std::to_string(height) + " is outside [1, 65535]");
  }
  if (delay_cs < 0 || delay_cs > 65535) {
    throw InputError("GIF '" + path.string() + "': delay " + std::to_string(delay_cs) +
                     " cs is outside [0, 65535]");
  }
  if (palette_sample.empty()) {
    throw InputError("GIF '" + path.string() + "': no frames to fit the palette to");
  }
  const size_t n = size_t(width) * height;
  for (size_t i = 0; i < palette_sample.size(); ++i) {
    if (palette_sample[i].size() != n * 3) {
      throw InputError("GIF '" + path.string() + "': frame " + std::to_string(i) + " has " +
                       std::to_string(palette_sample[i].size()) + " bytes, not " +
                       std::to_string(width) + "x" + std::to_string(height) + "x3");
    }
  }
  Impl& m = *impl_;
  m.path = path;
  m.width = width;
  m.height = height;
  m.delay_cs = delay_cs;
  m.palette = FitPalette(palette_sample, n);
  m.index.resize(n);
  m.file = std::make_unique<AtomicFile>(path);
  int err = 0;
  m.fd = ::open(m.file->temp_path().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (m.fd < 0) throw IoError(WriteFailure(path, errno));
  m.gif = EGifOpen(&m, &Impl::Output, &err);
  if (!m.gif) {
    m.Close();
    throw IoError("cannot open GIF '" + path.string() + "': " + GifErrorString(err));
  }
  ColorMapObject* cmap = GifMakeMapObject(256, m.palette.colors.data());
  if (!cmap) m.Fail("palette");
  EGifSetGifVersion(m.gif, true);
  if (EGifPutScreenDesc(m.gif, width, height, 8, 0, cmap) == GIF_ERROR) {
    GifFreeMapObject(cmap);
    m.Fail("screen descriptor");
  }
  GifFreeMapObject(cmap);
  // Netscape loop extension: loop forever.
  const GifByteType netscape[] = {'N', 'E', 'T', 'S', 'C', 'A', 'P', 'E', '2', '.', '0'};
  const GifByteType loop[] = {1, 0, 0};
  if (EGifPutExtensionLeader(m.gif, APPLICATION_EXT_FUNC_CODE) == GIF_ERROR ||
      EGifPutExtensionBlock(m.gif, sizeof netscape, netscape) == GIF_ERROR ||
      EGifPutExtensionBlock(m.gif, sizeof loop, loop) == GIF_ERROR ||
      EGifPutExtensionTrailer(m.gif) == GIF_ERROR) {
    m.Fail("loop extension");
  }
}

GifWriter::~GifWriter() {
  if (impl_) impl_->Close();  // without Finish(): the temporary file is removed
}

int64_t GifWriter::frames() const { return impl_->frames; }

void GifWriter::Add(std::span<const uint8_t> frame) {
  Impl& m = *impl_;
  if (!m.gif) throw InputError("GIF '" + m.path.string() + "': Add after Finish");
  const size_t n = m.index.size();
  if (frame.size() != n * 3) {
    throw InputError("GIF '" + m.path.string() + "': a frame of " + std::to_string(frame.size()) +
                     " bytes is not " + std::to_string(m.width) + "x" + std::to_string(m.height) +
                     "x3");
  }
  GraphicsControlBlock gcb{};
  gcb.DisposalMode = DISPOSAL_UNSPECIFIED;
  gcb.DelayTime = m.delay_cs;
  gcb.TransparentColor = NO_TRANSPARENT_COLOR;
  GifByteType ext[4];
  EGifGCBToExtension(&gcb, ext);
  if (EGifPutExtension(m.gif, GRAPHICS_EXT_FUNC_CODE, 4, ext) == GIF_ERROR) m.Fail("frame delay");
  for (size_t p = 0; p < n; ++p) {
    m.index[p] = m.palette.lut[((frame[3 * p] >> 3) << 10) | ((frame[3 * p + 1] >> 3) << 5) |
                               (frame[3 * p + 2] >> 3)];
  }
  if (EGifPutImageDesc(m.gif, 0, 0, m.width, m.height, false, nullptr) == GIF_ERROR) {
    m.Fail("image");
  }
  for (int y = 0; y < m.height; ++y) {
    if (EGifPutLine(m.gif, m.index.data() + size_t(y) * m.width, m.width) == GIF_ERROR) {
      m.Fail("pixels");
    }
  }
  ++m.frames;
}

void GifWriter::Finish() {
  Impl& m = *impl_;
  if (!m.gif) throw InputError("GIF '" + m.path.string() + "': Finish called twice");
  if (m.frames == 0) {
    m.Close();
    throw InputError("GIF '" + m.path.string() + "': no frames");
  }
  int err = 0;
  int rc = EGifCloseFile(m.gif, &err);
  m.gif = nullptr;
  const int close_errno = ::close(m.fd) != 0 ? errno : 0;
  m.fd = -1;
  if (m.write_errno != 0) throw IoError(WriteFailure(m.path, m.write_errno));
  if (close_errno != 0) throw IoError(WriteFailure(m.path, close_errno));
  if (rc == GIF_ERROR) {
    throw IoError("cannot finish GIF '" + m.path.string() + "': " + GifErrorString(err));
  }
  m.file->Commit();
}

void WriteGif(const std::filesystem::path& path, const std::vector<std::vector<uint8_t>>& frames,
              int width, int height, int delay_cs) {
  std::vector<std::span<const uint8_t>> views(frames.begin(), frames.end());
  WriteGif(path, views, width, height, delay_cs);
}

void WriteGif(const std::filesystem::path& path,
              const std::vector<std::span<const uint8_t>>& frames, int width, int height,
              int delay_cs) {
  if (frames.empty()) throw InputError("WriteGif: no frames for '" + path.string() + "'");
  GifWriter writer(path, width, height, delay_cs, frames);  // validates every frame
  for (const auto& frame : frames) writer.Add(frame);
  writer.Finish();
}

}  // namespace keycld
