// Image files users look at: PNG (stb) and animated GIF (giflib). Written atomically; PNGs
// are read back with stb_image.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

namespace keycld {

/// An image file read by ReadPng: uint8 [height, width, channels], row 0 = top.
struct PngImage {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
};

/// Reads a PNG with its own channel count (1 grey, 2 grey + alpha, 3 RGB, 4 RGBA). Throws
/// IoError if the file is missing or unreadable and FormatError if it is not a PNG.
PngImage ReadPng(const std::filesystem::path& path);

/// Writes an RGB uint8 image [height, width, 3] (row 0 = top) as PNG. Throws IoError.
void WritePng(const std::filesystem::path& path, std::span<const uint8_t> rgb, int width,
              int height);

/// Writes RGB uint8 frames [T][height, width, 3] as a looping animated GIF with
/// `delay_cs` hundredths of a second per frame (browsers show delays below 2 as 10). One
/// global 256-colour palette for all frames: the 16 most frequent exact colours of a sample of
/// the frames (flat backgrounds and markers stay exact) plus a median cut (giflib) of the
/// sample; each pixel takes the palette colour nearest to it at 5 bits per channel. Throws
/// InputError (no frames, a size outside [1, 65535], a frame of another size, a delay outside
/// [0, 65535]) before touching the file, IoError if it cannot be written.
void WriteGif(const std::filesystem::path& path, const std::vector<std::vector<uint8_t>>& frames,
              int width, int height, int delay_cs);
/// The same for frames held elsewhere (views of [height, width, 3] each).
void WriteGif(const std::filesystem::path& path,
              const std::vector<std::span<const uint8_t>>& frames, int width, int height,
              int delay_cs);

/// Streams a looping animated GIF frame by frame (long videos need not fit in memory). The
/// palette is fitted, as by WriteGif, to `palette_sample`: a few representative frames of the
/// same size. Add() frames, then Finish() renames the temporary file onto `path`; destroyed
/// without Finish() (an error, an interruption), it leaves nothing behind. Throws InputError
/// for bad sizes or delays, an empty sample, frames of another size, or Finish() without frames;
/// IoError if the file cannot be written.
class GifWriter {
 public:
  GifWriter(const std::filesystem::path& path, int width, int height, int delay_cs,
            const std::vector<std::span<const uint8_t>>& palette_sample);
  ~GifWriter();
  GifWriter(const GifWriter&) = delete;
  GifWriter& operator=(const GifWriter&) = delete;

  /// Appends one RGB frame [height, width, 3].
  void Add(std::span<const uint8_t> frame);
  void Finish();
  int64_t frames() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace keycld
