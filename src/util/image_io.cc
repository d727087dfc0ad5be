#include "keycld/util/image_io.h"

#include <gif_lib.h>
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>

#include <cstring>
#include <fstream>
#include <string>

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
  AtomicFile file(path);
  if (!stbi_write_png(file.temp_path().c_str(), width, height, 3, rgb.data(), width * 3)) {
    throw IoError("cannot write PNG '" + path.string() + "'");
  }
  file.Commit();
}

void WriteGif(const std::filesystem::path& path, const std::vector<std::vector<uint8_t>>& frames,
              int width, int height, int delay_cs) {
  if (frames.empty()) throw InputError("WriteGif: no frames for '" + path.string() + "'");
  const size_t n = size_t(width) * height;
  AtomicFile file(path);
  int err = 0;
  GifFileType* gif = EGifOpenFileName(file.temp_path().c_str(), false, &err);
  if (!gif) throw IoError("cannot open GIF '" + path.string() + "': " + GifErrorString(err));
  auto fail = [&](const std::string& what) {
    int close_err = 0;
    EGifCloseFile(gif, &close_err);
    throw IoError("cannot write GIF '" + path.string() + "': " + what);
  };
  // One global palette: 6x7x6 colour cube (252 colours), nearest colour per pixel.
  constexpr int kR = 6, kG = 7, kB = 6;
  ColorMapObject* cmap = GifMakeMapObject(256, nullptr);
  for (int i = 0; i < 256; ++i) {
    int r = i / (kG * kB), g = (i / kB) % kG, b = i % kB;
    if (i >= kR * kG * kB) r = g = b = 0;
    cmap->Colors[i] = {GifByteType(r * 255 / (kR - 1)), GifByteType(g * 255 / (kG - 1)),
                       GifByteType(b * 255 / (kB - 1))};
  }
  EGifSetGifVersion(gif, true);
  if (EGifPutScreenDesc(gif, width, height, 8, 0, cmap) == GIF_ERROR) {
    GifFreeMapObject(cmap);
    fail("screen descriptor");
  }
  GifFreeMapObject(cmap);
  // Netscape loop extension: loop forever.
  const GifByteType netscape[] = {'N', 'E', 'T', 'S', 'C', 'A', 'P', 'E', '2', '.', '0'};
  const GifByteType loop[] = {1, 0, 0};
  if (EGifPutExtensionLeader(gif, APPLICATION_EXT_FUNC_CODE) == GIF_ERROR ||
      EGifPutExtensionBlock(gif, sizeof netscape, netscape) == GIF_ERROR ||
      EGifPutExtensionBlock(gif, sizeof loop, loop) == GIF_ERROR ||
      EGifPutExtensionTrailer(gif) == GIF_ERROR) {
    fail("loop extension");
  }
  std::vector<GifByteType> index(n);
  for (const auto& frame : frames) {
    if (frame.size() != n * 3) fail("a frame is not " + std::to_string(width) + "x" +
                                    std::to_string(height) + "x3");
    GraphicsControlBlock gcb{};
    gcb.DisposalMode = DISPOSAL_UNSPECIFIED;
    gcb.DelayTime = delay_cs;
    gcb.TransparentColor = NO_TRANSPARENT_COLOR;
    GifByteType ext[4];
    EGifGCBToExtension(&gcb, ext);
    if (EGifPutExtension(gif, GRAPHICS_EXT_FUNC_CODE, 4, ext) == GIF_ERROR) fail("frame delay");
    for (size_t p = 0; p < n; ++p) {
      int r = (frame[3 * p] * (kR - 1) + 127) / 255;
      int g = (frame[3 * p + 1] * (kG - 1) + 127) / 255;
      int b = (frame[3 * p + 2] * (kB - 1) + 127) / 255;
      index[p] = GifByteType((r * kG + g) * kB + b);
    }
    if (EGifPutImageDesc(gif, 0, 0, width, height, false, nullptr) == GIF_ERROR) fail("image");
    for (int y = 0; y < height; ++y) {
      if (EGifPutLine(gif, index.data() + size_t(y) * width, width) == GIF_ERROR) fail("pixels");
    }
  }
  if (EGifCloseFile(gif, &err) == GIF_ERROR) {
    throw IoError("cannot finish GIF '" + path.string() + "': " + GifErrorString(err));
  }
  file.Commit();
}

}  // namespace keycld
