#include "keycld/data/video_io.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <cstring>
#include <optional>

#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"
#include "keycld/util/image_io.h"

namespace keycld {

namespace fs = std::filesystem;

namespace {

std::string AvError(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, buf, sizeof buf);
  return buf;
}

// FFmpeg prints its own warnings to stderr; errors become our exceptions instead.
void QuietFfmpeg() { av_log_set_level(AV_LOG_ERROR - 8); }

std::string SizeString(int w, int h) { return std::to_string(w) + "×" + std::to_string(h); }

struct FormatCloser {
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct CodecCloser {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameCloser {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketCloser {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsCloser {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};

// A video file decoded frame by frame, converted to RGB24.
class VideoSource : public FrameSource {
 public:
  explicit VideoSource(const fs::path& path) : path_(path.string()) {
    QuietFfmpeg();
    AVFormatContext* fmt = nullptr;
    int err = avformat_open_input(&fmt, path_.c_str(), nullptr, nullptr);
    if (err < 0) {
      throw FormatError("'" + path_ + "' cannot be opened as a video: " + AvError(err));
    }
    fmt_.reset(fmt);
    err = avformat_find_stream_info(fmt_.get(), nullptr);
    if (err < 0) throw FormatError("'" + path_ + "': no stream information: " + AvError(err));
    const AVCodec* codec = nullptr;
    stream_ = av_find_best_stream(fmt_.get(), AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (stream_ < 0 || !codec) {
      throw FormatError("'" + path_ + "' has no video stream FFmpeg can decode");
    }
    const AVStream* st = fmt_->streams[stream_];
    codec_.reset(avcodec_alloc_context3(codec));
    if (!codec_) throw IoError("out of memory opening '" + path_ + "'");
    err = avcodec_parameters_to_context(codec_.get(), st->codecpar);
    if (err >= 0) err = avcodec_open2(codec_.get(), codec, nullptr);
    if (err < 0) throw FormatError("'" + path_ + "': cannot open its decoder: " + AvError(err));
    AVRational rate = st->avg_frame_rate.num > 0 ? st->avg_frame_rate : st->r_frame_rate;
    rate_ = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0.0;
    frame_.reset(av_frame_alloc());
    packet_.reset(av_packet_alloc());
    if (!frame_ || !packet_) throw IoError("out of memory opening '" + path_ + "'");
  }

  ~VideoSource() override { sws_freeContext(sws_); }

  bool Next(RgbFrame* out) override {
    while (true) {
      int err = avcodec_receive_frame(codec_.get(), frame_.get());
      if (err == 0) {
        Convert(out);
        ++count_;
        return true;
      }
      if (err == AVERROR_EOF) return false;
      if (err != AVERROR(EAGAIN)) Fail("cannot decode frame " + std::to_string(count_), err);
      if (flushing_) return false;
      err = av_read_frame(fmt_.get(), packet_.get());
      if (err == AVERROR_EOF) {
        flushing_ = true;
        err = avcodec_send_packet(codec_.get(), nullptr);
        if (err < 0 && err != AVERROR_EOF) Fail("cannot flush the decoder", err);
        continue;
      }
      if (err < 0) Fail("cannot read after frame " + std::to_string(count_), err);
      if (packet_->stream_index == stream_) {
        err = avcodec_send_packet(codec_.get(), packet_.get());
        av_packet_unref(packet_.get());
        if (err < 0 && err != AVERROR(EAGAIN)) {
          Fail("cannot decode frame " + std::to_string(count_), err);
        }
      } else {
        av_packet_unref(packet_.get());
      }
    }
  }

  double frame_rate() const override { return rate_; }
  std::string name() const override { return path_; }

 private:
  [[noreturn]] void Fail(const std::string& what, int err) const {
    throw FormatError("'" + path_ + "': " + what + ": " + AvError(err));
  }

  void Convert(RgbFrame* out) {
    const AVFrame* f = frame_.get();
    if (width_ == 0) {
      width_ = f->width;
      height_ = f->height;
    } else if (f->width != width_ || f->height != height_) {
      throw FormatError("'" + path_ + "': frame " + std::to_string(count_) + " is " +
                        SizeString(f->width, f->height) + " but the first frame is " +
                        SizeString(width_, height_));
    }
    sws_ = sws_getCachedContext(sws_, f->width, f->height, AVPixelFormat(f->format), f->width,
                                f->height, AV_PIX_FMT_RGB24, SWS_BICUBIC | SWS_ACCURATE_RND,
                                nullptr, nullptr, nullptr);
    if (!sws_) throw FormatError("'" + path_ + "': cannot convert its pixel format to RGB");
    // The stream's own YUV matrix and range (limited unless it says full), to full-range RGB.
    const int* coefficients =
        sws_getCoefficients(f->colorspace == AVCOL_SPC_BT709 ? SWS_CS_ITU709 : SWS_CS_ITU601);
    sws_setColorspaceDetails(sws_, coefficients, f->color_range == AVCOL_RANGE_JPEG ? 1 : 0,
                             coefficients, 1, 0, 1 << 16, 1 << 16);
    out->width = f->width;
    out->height = f->height;
    out->pixels.resize(size_t(f->width) * f->height * 3);
    uint8_t* dst[4] = {out->pixels.data(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {f->width * 3, 0, 0, 0};
    sws_scale(sws_, f->data, f->linesize, 0, f->height, dst, dst_stride);
    av_frame_unref(frame_.get());
  }

  std::string path_;
  std::unique_ptr<AVFormatContext, FormatCloser> fmt_;
  std::unique_ptr<AVCodecContext, CodecCloser> codec_;
  std::unique_ptr<AVFrame, FrameCloser> frame_;
  std::unique_ptr<AVPacket, PacketCloser> packet_;
  SwsContext* sws_ = nullptr;
  int stream_ = -1;
  double rate_ = 0;
  bool flushing_ = false;
  int64_t count_ = 0;
  int width_ = 0, height_ = 0;
};

}  // namespace

// Runs of digits compare as numbers, so f2.png comes before f10.png whether or not the numbers
// are zero-padded.
bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ei = i, ej = j;
      while (ei < a.size() && digit(a[ei])) ++ei;
      while (ej < b.size() && digit(b[ej])) ++ej;
      size_t si = i, sj = j;
      while (si + 1 < ei && a[si] == '0') ++si;  // leading zeros
      while (sj + 1 < ej && b[sj] == '0') ++sj;
      if (ei - si != ej - sj) return ei - si < ej - sj;
      const int c = a.compare(si, ei - si, b, sj, ej - sj);
      if (c != 0) return c < 0;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j || (a.size() - i == b.size() - j && a < b);
}

namespace {

// Every *.png of a folder, in natural name order.
class PngFolderSource : public FrameSource {
 public:
  explicit PngFolderSource(const fs::path& dir) : dir_(dir.string()) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::string ext = e.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(),
                     [](unsigned char c) { return char(std::tolower(c)); });
      if (e.is_regular_file() && ext == ".png") files_.push_back(e.path());
    }
    if (ec) throw IoError("cannot list '" + dir_ + "': " + ec.message());
    if (files_.empty()) throw FormatError("'" + dir_ + "' holds no PNG frames (*.png)");
    std::sort(files_.begin(), files_.end(), [](const fs::path& x, const fs::path& y) {
      return NaturalLess(x.filename().string(), y.filename().string());
    });
  }

  bool Next(RgbFrame* out) override {
    if (next_ >= files_.size()) return false;
    const fs::path& file = files_[next_++];
    PngImage img = ReadPng(file);
    if (width_ == 0) {
      width_ = img.width;
      height_ = img.height;
    } else if (img.width != width_ || img.height != height_) {
      throw FormatError("'" + file.string() + "' is " + SizeString(img.width, img.height) +
                        " but the first frame '" + files_[0].string() + "' is " +
                        SizeString(width_, height_) + ": all frames must have one size");
    }
    out->width = img.width;
    out->height = img.height;
    out->pixels.resize(size_t(img.width) * img.height * 3);
    const size_t n = size_t(img.width) * img.height;
    const int c = img.channels;
    for (size_t p = 0; p < n; ++p) {
      const uint8_t* s = img.pixels.data() + p * size_t(c);
      for (int k = 0; k < 3; ++k) out->pixels[p * 3 + size_t(k)] = c >= 3 ? s[k] : s[0];
    }
    return true;
  }
  double frame_rate() const override { return 0.0; }
  std::string name() const override { return dir_; }

 private:
  std::string dir_;
  std::vector<fs::path> files_;
  size_t next_ = 0;
  int width_ = 0, height_ = 0;
};

}  // namespace

std::string FfmpegVersion() {
  auto v = [](unsigned x) {
    return std::to_string(AV_VERSION_MAJOR(x)) + "." + std::to_string(AV_VERSION_MINOR(x)) + "." +
           std::to_string(AV_VERSION_MICRO(x));
  };
  return "libavformat " + v(avformat_version()) + ", libavcodec " + v(avcodec_version()) +
         ", libswscale " + v(swscale_version());
}

std::unique_ptr<FrameSource> OpenFrameSource(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw IoError("input not found: '" + path.string() + "'");
  if (fs::is_directory(path, ec)) return std::make_unique<PngFolderSource>(path);
  if (!fs::is_regular_file(path, ec)) {
    throw IoError("'" + path.string() + "' is neither a video file nor a folder of PNG frames");
  }
  return std::make_unique<VideoSource>(path);
}

struct VideoWriter::Impl {
  std::optional<AtomicFile> file;
  AVFormatContext* fmt = nullptr;
  std::unique_ptr<AVCodecContext, CodecCloser> codec;
  std::unique_ptr<AVFrame, FrameCloser> frame;
  std::unique_ptr<AVPacket, PacketCloser> packet;
  std::unique_ptr<SwsContext, SwsCloser> sws;
  AVStream* stream = nullptr;
  int width = 0, height = 0;
  int64_t count = 0;
  bool header_written = false, finished = false;
  std::string path;

  ~Impl() {
    if (fmt) {
      if (fmt->pb) avio_closep(&fmt->pb);
      avformat_free_context(fmt);
    }
  }

  [[noreturn]] void Fail(const std::string& what, int err) const {
    throw IoError("cannot write video '" + path + "': " + what + ": " + AvError(err));
  }

  // Sends `f` (nullptr: flush) to the encoder and writes every packet it gives back.
  void Encode(const AVFrame* f) {
    int err = avcodec_send_frame(codec.get(), f);
    if (err < 0) Fail("encoder", err);
    while (true) {
      err = avcodec_receive_packet(codec.get(), packet.get());
      if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) return;
      if (err < 0) Fail("encoder", err);
      av_packet_rescale_ts(packet.get(), codec->time_base, stream->time_base);
      packet->stream_index = stream->index;
      err = av_interleaved_write_frame(fmt, packet.get());
      if (err < 0) Fail("write", err);
    }
  }
};

VideoWriter::VideoWriter(const fs::path& path, int width, int height, double fps, int crf)
    : impl_(std::make_unique<Impl>()) {
  QuietFfmpeg();
  Impl& m = *impl_;
  m.path = path.string();
  if (width < 2 || height < 2 || width > 16384 || height > 16384 || width % 2 || height % 2) {
    throw InputError("video '" + m.path + "': frame size " + SizeString(width, height) +
                     " must be even and in [2, 16384] (H.264 yuv420p)");
  }
  if (!(fps > 0 && fps <= 10000)) {
    throw InputError("video '" + m.path + "': frame rate " + std::to_string(fps) +
                     " must be in (0, 10000] frames/s");
  }
  if (crf < 0 || crf > 51) {
    throw InputError("video '" + m.path + "': crf " + std::to_string(crf) + " is outside [0, 51]");
  }
  const AVOutputFormat* oformat = av_guess_format(nullptr, m.path.c_str(), nullptr);
  if (!oformat) {
    throw InputError("video '" + m.path +
                     "': FFmpeg knows no container for this extension (use .mp4 or .mkv)");
  }
  const AVCodec* enc = avcodec_find_encoder_by_name("libx264");
  if (!enc) enc = avcodec_find_encoder(AV_CODEC_ID_H264);
  if (!enc) throw FormatError("this FFmpeg has no H.264 encoder (libx264)");
  m.width = width;
  m.height = height;
  m.file.emplace(path);
  int err = avformat_alloc_output_context2(&m.fmt, oformat, nullptr, m.file->temp_path().c_str());
  if (err < 0 || !m.fmt) m.Fail("container", err);
  m.stream = avformat_new_stream(m.fmt, nullptr);
  m.codec.reset(avcodec_alloc_context3(enc));
  m.frame.reset(av_frame_alloc());
  m.packet.reset(av_packet_alloc());
  if (!m.stream || !m.codec || !m.frame || !m.packet) throw IoError("out of memory");
  const AVRational rate = av_d2q(fps, 100000);
  m.codec->width = width;
  m.codec->height = height;
  m.codec->pix_fmt = AV_PIX_FMT_YUV420P;
  m.codec->time_base = av_inv_q(rate);
  m.codec->framerate = rate;
  m.codec->gop_size = 50;
  // Full-range BT.601 YUV: no 16–235 quantisation, and the decoder reads the range from the
  // stream (measured on a 16 px pendulum at 4×, crf 0: limited range darkened every channel
  // by about 1.5 levels on the way back).
  m.codec->color_range = AVCOL_RANGE_JPEG;
  m.codec->colorspace = AVCOL_SPC_SMPTE170M;
  if (m.fmt->oformat->flags & AVFMT_GLOBALHEADER) m.codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  av_opt_set(m.codec->priv_data, "crf", std::to_string(crf).c_str(), 0);
  av_opt_set(m.codec->priv_data, "preset", "medium", 0);
  err = avcodec_open2(m.codec.get(), enc, nullptr);
  if (err < 0) m.Fail("cannot open the H.264 encoder", err);
  err = avcodec_parameters_from_context(m.stream->codecpar, m.codec.get());
  if (err < 0) m.Fail("stream parameters", err);
  m.stream->time_base = m.codec->time_base;
  m.stream->avg_frame_rate = rate;
  err = avio_open(&m.fmt->pb, m.file->temp_path().c_str(), AVIO_FLAG_WRITE);
  if (err < 0) m.Fail("open", err);
  err = avformat_write_header(m.fmt, nullptr);
  if (err < 0) m.Fail("header", err);
  m.header_written = true;
  m.frame->format = AV_PIX_FMT_YUV420P;
  m.frame->width = width;
  m.frame->height = height;
  err = av_frame_get_buffer(m.frame.get(), 0);
  if (err < 0) m.Fail("frame buffer", err);
  m.sws.reset(sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, AV_PIX_FMT_YUV420P,
                             SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr));
  if (!m.sws) throw FormatError("cannot convert RGB to yuv420p");
  const int* coefficients = sws_getCoefficients(SWS_CS_ITU601);
  sws_setColorspaceDetails(m.sws.get(), coefficients, 1, coefficients, 1, 0, 1 << 16, 1 << 16);
}

VideoWriter::~VideoWriter() = default;

void VideoWriter::Add(std::span<const uint8_t> rgb) {
  Impl& m = *impl_;
  if (m.finished) throw InputError("video '" + m.path + "': Add() after Finish()");
  if (rgb.size() != size_t(m.width) * m.height * 3) {
    throw InputError("video '" + m.path + "': a frame of " + std::to_string(rgb.size()) +
                     " bytes, expected " + SizeString(m.width, m.height) + "×3");
  }
  int err = av_frame_make_writable(m.frame.get());
  if (err < 0) m.Fail("frame buffer", err);
  const uint8_t* src[4] = {rgb.data(), nullptr, nullptr, nullptr};
  const int src_stride[4] = {m.width * 3, 0, 0, 0};
  sws_scale(m.sws.get(), src, src_stride, 0, m.height, m.frame->data, m.frame->linesize);
  m.frame->pts = m.count++;
  m.Encode(m.frame.get());
}

void VideoWriter::Finish() {
  Impl& m = *impl_;
  if (m.finished) return;
  if (m.count == 0) throw InputError("video '" + m.path + "': no frames");
  m.Encode(nullptr);
  int err = av_write_trailer(m.fmt);
  if (err < 0) m.Fail("trailer", err);
  err = avio_closep(&m.fmt->pb);
  if (err < 0) m.Fail("close", err);
  m.file->Commit();
  m.finished = true;
}

int64_t VideoWriter::frames() const { return impl_->count; }

SquareScaler::SquareScaler() = default;
SquareScaler::~SquareScaler() { sws_freeContext(sws_); }

void SquareScaler::Scale(const RgbFrame& frame, int x, int y, int side, int size, uint8_t* out) {
  if (side < 1 || size < 1 || x < 0 || y < 0 || int64_t(x) + side > frame.width ||
      int64_t(y) + side > frame.height) {
    throw InputError("the crop square " + std::to_string(side) + "×" + std::to_string(side) +
                     " at (" + std::to_string(x) + ", " + std::to_string(y) +
                     ") does not lie inside the " + SizeString(frame.width, frame.height) +
                     " frame");
  }
  const size_t row = size_t(frame.width) * 3;
  const uint8_t* src = frame.pixels.data() + size_t(y) * row + size_t(x) * 3;
  if (side == size) {
    for (int r = 0; r < side; ++r) {
      std::memcpy(out + size_t(r) * size * 3, src + size_t(r) * row, size_t(side) * 3);
    }
    return;
  }
  // Scaled as planar RGB (GBRP), each channel filtered on its own, so that no colour conversion
  // takes part. libswscale's area filter is not an exact box: on 3×3 blocks of one value it
  // gives the block value within 2 levels (tests/data_import_test.cc).
  const size_t in_plane = size_t(side) * side, out_plane = size_t(size) * size;
  planes_in_.resize(in_plane * 3);
  planes_out_.resize(out_plane * 3);
  std::vector<uint8_t>& planes_in = planes_in_;
  std::vector<uint8_t>& planes_out = planes_out_;
  for (int r = 0; r < side; ++r) {
    for (int c = 0; c < side; ++c) {
      const uint8_t* p = src + size_t(r) * row + size_t(c) * 3;
      const size_t q = size_t(r) * side + c;
      planes_in[q] = p[1];                 // G
      planes_in[in_plane + q] = p[2];      // B
      planes_in[2 * in_plane + q] = p[0];  // R
    }
  }
  sws_ = sws_getCachedContext(sws_, side, side, AV_PIX_FMT_GBRP, size, size, AV_PIX_FMT_GBRP,
                              (size < side ? SWS_AREA : SWS_BICUBIC) | SWS_ACCURATE_RND, nullptr,
                              nullptr, nullptr);
  if (!sws_)
    throw FormatError("libswscale cannot scale " + std::to_string(side) + " to " +
                      std::to_string(size));
  const uint8_t* s[4] = {planes_in.data(), planes_in.data() + in_plane,
                         planes_in.data() + 2 * in_plane, nullptr};
  const int ss[4] = {side, side, side, 0};
  uint8_t* d[4] = {planes_out.data(), planes_out.data() + out_plane,
                   planes_out.data() + 2 * out_plane, nullptr};
  const int ds[4] = {size, size, size, 0};
  sws_scale(sws_, s, ss, 0, side, d, ds);
  for (size_t q = 0; q < out_plane; ++q) {
    out[q * 3] = planes_out[2 * out_plane + q];
    out[q * 3 + 1] = planes_out[q];
    out[q * 3 + 2] = planes_out[out_plane + q];
  }
}

}  // namespace keycld
