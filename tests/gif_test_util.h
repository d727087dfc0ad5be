// Reads animated GIFs back with giflib (DGifSlurp) for the tests.
#pragma once

#include <gif_lib.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <vector>

namespace keycld::testing {

struct DecodedGif {
  int width = 0, height = 0;                   // logical screen
  std::vector<std::vector<uint8_t>> frames;    // RGB [height, width, 3] each
  std::vector<int> delays_cs;                  // per frame, from the graphics control blocks
  std::vector<int> frame_width, frame_height;  // each image descriptor
};

/// Decodes every frame of `path` into RGB; a failure is a test failure (empty result).
inline DecodedGif ReadGif(const std::filesystem::path& path) {
  DecodedGif out;
  int err = 0;
  GifFileType* gif = DGifOpenFileName(path.c_str(), &err);
  if (!gif) {
    ADD_FAILURE() << "cannot open GIF " << path << ": " << GifErrorString(err);
    return out;
  }
  if (DGifSlurp(gif) == GIF_ERROR) {
    ADD_FAILURE() << "cannot decode GIF " << path << ": " << GifErrorString(gif->Error);
    DGifCloseFile(gif, &err);
    return out;
  }
  out.width = gif->SWidth;
  out.height = gif->SHeight;
  for (int i = 0; i < gif->ImageCount; ++i) {
    const SavedImage& im = gif->SavedImages[i];
    const ColorMapObject* cmap = im.ImageDesc.ColorMap ? im.ImageDesc.ColorMap : gif->SColorMap;
    out.frame_width.push_back(im.ImageDesc.Width);
    out.frame_height.push_back(im.ImageDesc.Height);
    std::vector<uint8_t> rgb(size_t(out.width) * out.height * 3, 0);
    for (int y = 0; y < im.ImageDesc.Height; ++y) {
      for (int x = 0; x < im.ImageDesc.Width; ++x) {
        const GifColorType c = cmap->Colors[im.RasterBits[size_t(y) * im.ImageDesc.Width + x]];
        uint8_t* p = &rgb[(size_t(y + im.ImageDesc.Top) * out.width + x + im.ImageDesc.Left) * 3];
        p[0] = c.Red;
        p[1] = c.Green;
        p[2] = c.Blue;
      }
    }
    out.frames.push_back(std::move(rgb));
    GraphicsControlBlock gcb{};
    out.delays_cs.push_back(DGifSavedExtensionToGCB(gif, i, &gcb) == GIF_OK ? gcb.DelayTime : -1);
  }
  DGifCloseFile(gif, &err);
  return out;
}

}  // namespace keycld::testing
