// Image files users look at: PNG (stb) and animated GIF (giflib). Written atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace keycld {

/// Writes an RGB uint8 image [height, width, 3] (row 0 = top) as PNG. Throws IoError.
void WritePng(const std::filesystem::path& path, std::span<const uint8_t> rgb, int width,
              int height);

/// Writes RGB uint8 frames [T][height, width, 3] as a looping animated GIF with
/// `delay_cs` hundredths of a second per frame. Throws IoError / InputError.
void WriteGif(const std::filesystem::path& path, const std::vector<std::vector<uint8_t>>& frames,
              int width, int height, int delay_cs);

}  // namespace keycld
