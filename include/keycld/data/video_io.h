// Video files and folders of PNG frames as sequences of RGB frames: decoding with FFmpeg's
// libraries (libavformat, libavcodec, libswscale; any container and codec they read), H.264
// encoding (libx264 through libavcodec) for `keycld export`. Used by data/import.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

struct SwsContext;  // libswscale's

namespace keycld {

/// "libavformat 59.27.100, libavcodec 59.37.100, libswscale 6.7.100" (the libraries linked).
std::string FfmpegVersion();

/// One RGB frame: uint8 [height, width, 3], row 0 = top.
struct RgbFrame {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;
};

/// A sequence of frames read one at a time: a video file or a folder of PNG frames.
class FrameSource {
 public:
  virtual ~FrameSource() = default;
  /// The next frame, or false at the end. Throws FormatError for a frame that cannot be decoded
  /// or whose size differs from the first frame's (the message names the file and both sizes).
  virtual bool Next(RgbFrame* frame) = 0;
  /// Frames per second the source states (a video's stream rate), 0 when it states none (a
  /// folder of PNG frames).
  virtual double frame_rate() const = 0;
  /// What the source is, for messages: the file or folder.
  virtual std::string name() const = 0;
};

/// A video file (decoded with FFmpeg) or a folder of PNG frames (every *.png in it, in the
/// natural order of their names: f2.png before f10.png; grey, grey + alpha and RGBA are turned
/// into RGB, alpha dropped).
/// Throws IoError (missing, unreadable), FormatError (not a video FFmpeg can decode, no video
/// stream, a folder without PNG files).
std::unique_ptr<FrameSource> OpenFrameSource(const std::filesystem::path& path);

/// Writes RGB frames of one size as an H.264 video (yuv420p, constant rate factor `crf`:
/// 0 = lossless … 51 = worst, 18 ≈ visually lossless) in the container the file name asks for
/// (.mp4, .mkv, …), at `fps` frames per second. The file appears atomically at Finish();
/// destroyed without it (an error, an interruption) it leaves nothing. Throws InputError (odd or
/// out-of-range sizes: yuv420p needs even ones; fps ≤ 0; crf outside [0, 51]; an extension
/// FFmpeg knows no container for), IoError (cannot write), FormatError (no H.264 encoder).
class VideoWriter {
 public:
  VideoWriter(const std::filesystem::path& path, int width, int height, double fps, int crf);
  ~VideoWriter();
  VideoWriter(const VideoWriter&) = delete;
  VideoWriter& operator=(const VideoWriter&) = delete;
  /// Appends one frame [height, width, 3]. InputError for a frame of another size.
  void Add(std::span<const uint8_t> rgb);
  void Finish();
  int64_t frames() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Whether name `a` comes before `b` in natural order (digit runs compared as numbers).
bool NaturalLess(const std::string& a, const std::string& b);

/// Cuts squares out of frames and scales them, keeping its libswscale context and buffers from
/// one frame to the next.
class SquareScaler {
 public:
  SquareScaler();
  ~SquareScaler();
  SquareScaler(const SquareScaler&) = delete;
  SquareScaler& operator=(const SquareScaler&) = delete;
  /// Writes the square [x, x + side) × [y, y + side) of `frame`, scaled to size × size, into
  /// `out` (uint8 [size, size, 3]): an exact copy when side == size, area averaging when it
  /// shrinks, bicubic when it grows (libswscale). Throws InputError when the square leaves the
  /// frame or a size is not positive.
  void Scale(const RgbFrame& frame, int x, int y, int side, int size, uint8_t* out);

 private:
  ::SwsContext* sws_ = nullptr;
  std::vector<uint8_t> planes_in_, planes_out_;
};

}  // namespace keycld
