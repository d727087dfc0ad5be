#include "keycld/data/import.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "dataset_writer.h"
#include "keycld/data/generate.h"
#include "keycld/data/video_io.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/image_io.h"
#include "keycld/util/interrupt.h"
#include "keycld/util/progress.h"

namespace keycld {

namespace fs = std::filesystem;

namespace {

// Refuses an output path that would lose something: an existing file without `force`, and
// anything that is not a regular file (a folder, a device, a FIFO, a symbolic link), which
// renaming over would replace.
void CheckOutputPath(const fs::path& out, bool force, const std::string& what) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(out, ec);
  if (!fs::exists(st)) return;
  if (fs::is_directory(st)) {
    throw IoError("'" + out.string() + "' is a directory, not a " + what + " file");
  }
  if (!fs::is_regular_file(st)) {
    throw IoError("'" + out.string() + "' exists and is not a regular file (a link, a device " +
                  "or a pipe): give a new file name");
  }
  if (!force) {
    throw InputError("'" + out.string() + "' exists: rerun with --force to replace it");
  }
}

void ValidateImportOptions(const ImportOptions& o) {
  if (o.inputs.empty()) throw InputError("import: give at least one video file or PNG folder");
  if (o.system.empty()) {
    throw InputError("import: --system is required (a built-in name or a description file)");
  }
  if (o.out.empty()) throw InputError("import: --out FILE.h5 is required");
  if (o.size < 8 || o.size > 1024) {
    throw InputError("--size must be in [8, 1024] pixels, got " + std::to_string(o.size));
  }
  if (o.frames < 3 || o.frames > 100000) {
    throw InputError("--frames (frames per run) must be in [3, 100000], got " +
                     std::to_string(o.frames));
  }
  if (o.stride < 1 || o.stride > 10000) {
    throw InputError("--stride must be in [1, 10000], got " + std::to_string(o.stride));
  }
  if (o.skip < 0) throw InputError("--skip must be ≥ 0, got " + std::to_string(o.skip));
  if (o.crop && ((*o.crop)[0] < 0 || (*o.crop)[1] < 0 || (*o.crop)[2] < 1)) {
    throw InputError("--crop needs LEFT ≥ 0, TOP ≥ 0 and SIDE ≥ 1 (source pixels)");
  }
  // 1 µs to 1 s between frames: a 1 MHz camera is beyond anything the method was made for.
  if (o.dt && !(*o.dt >= 1e-6 && *o.dt <= 1)) {
    throw InputError("--dt must be in [1e-6, 1] s, got " + std::to_string(*o.dt));
  }
  CheckOutputPath(o.out, o.force, "data set");
  if (o.control && *o.control != ControlMode::kNone && o.actions.empty()) {
    throw InputError("--control " + ControlModeString(*o.control) +
                     " needs the actions: give --actions FILE.csv");
  }
  std::error_code ec;
  for (size_t i = 0; i < o.inputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (fs::equivalent(o.inputs[i], o.inputs[j], ec)) {
        throw InputError("'" + o.inputs[i].string() + "' is given twice: its runs would be in " +
                         "the data set twice (validation runs copying training runs)");
      }
    }
    if (fs::equivalent(o.inputs[i], o.out, ec)) {
      throw InputError("--out '" + o.out.string() + "' is an input");
    }
  }
  if (!o.actions.empty() && fs::equivalent(o.actions, o.out, ec)) {
    throw InputError("--out '" + o.out.string() + "' is the actions file");
  }
}

// A CSV cell read by strtod: the number, whether strtod took the whole (trimmed, non-empty)
// cell, and whether it is in decimal notation (strtod also reads hex, which an action never is).
struct CsvCell {
  double value = 0;
  bool parsed = false, decimal = false;
};
CsvCell ReadCsvCell(std::string cell) {
  const size_t b = cell.find_first_not_of(" \t"), e = cell.find_last_not_of(" \t");
  if (b == std::string::npos) return {};
  cell = cell.substr(b, e - b + 1);
  char* end = nullptr;
  CsvCell c;
  c.value = std::strtod(cell.c_str(), &end);
  c.parsed = end == cell.c_str() + cell.size();
  c.decimal = c.parsed && cell.find_first_of("xX") == std::string::npos;
  return c;
}

// The rows of an actions CSV: `columns` numbers each. A first row with no numeric cell is a
// header; any other row with a cell that is not a number (an empty one included) is an error.
std::vector<std::vector<double>> ReadActionsCsv(const fs::path& file, int columns) {
  std::ifstream in(file);
  if (!in) throw IoError("cannot read actions '" + file.string() + "'");
  std::vector<std::vector<double>> rows;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // UTF-8 BOM
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = file.string() + ":" + std::to_string(line_no);
    std::vector<CsvCell> cells;
    for (size_t start = 0;;) {  // every cell, a trailing empty one included
      const size_t comma = line.find(',', start);
      cells.push_back(ReadCsvCell(line.substr(start, comma - start)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    auto count = [&](bool CsvCell::*flag) {
      return std::count_if(cells.begin(), cells.end(), [&](const CsvCell& c) { return c.*flag; });
    };
    if (count(&CsvCell::decimal) < std::ptrdiff_t(cells.size())) {
      // A header names its columns: no cell of it reads as a number.
      if (rows.empty() && line_no == 1 && count(&CsvCell::parsed) == 0) continue;
      throw FormatError(where + ": '" + line + "' is not a row of numbers");
    }
    std::vector<double> row;
    for (const CsvCell& c : cells) {
      if (!std::isfinite(c.value)) {
        throw FormatError(where + ": '" + line + "' holds a value that is not a finite number");
      }
      row.push_back(c.value);
    }
    if (int(row.size()) != columns) {
      throw FormatError(where + ": " + std::to_string(row.size()) + " values, but the system has " +
                        std::to_string(columns) + " actuator(s)");
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty()) throw FormatError("'" + file.string() + "' holds no rows of actions");
  return rows;
}

// What one input gave: its kept frames [n, S, S, 3], the index of each kept frame in the
// concatenated source frames (for per-frame actions), and the seconds between kept frames.
struct DecodedInput {
  std::vector<uint8_t> frames;
  std::vector<int64_t> source_index;
  double dt = 0;
  int64_t read = 0;
};

DecodedInput DecodeInput(const fs::path& path, const ImportOptions& o, int64_t first_index,
                         ProgressBar& bar, int64_t* total_read) {
  std::unique_ptr<FrameSource> source = OpenFrameSource(path);
  DecodedInput d;
  if (o.dt) {
    d.dt = *o.dt;
  } else if (source->frame_rate() > 0) {
    d.dt = o.stride / source->frame_rate();
  } else {
    throw InputError("'" + path.string() +
                     "' states no frame rate (a folder of PNG frames): give --dt SECONDS");
  }
  const size_t P = size_t(o.size) * o.size * 3;
  RgbFrame frame;
  SquareScaler scaler;
  int left = 0, top = 0, side = 0;
  while (source->Next(&frame)) {
    if (InterruptRequested()) throw Interrupted("import interrupted; nothing was written");
    const int64_t i = d.read++;
    if (i == 0) {
      if (o.crop) {
        left = (*o.crop)[0];
        top = (*o.crop)[1];
        side = (*o.crop)[2];
      } else {
        side = std::min(frame.width, frame.height);
        left = (frame.width - side) / 2;
        top = (frame.height - side) / 2;
      }
      if (int64_t(left) + side > frame.width || int64_t(top) + side > frame.height) {
        throw InputError("--crop " + std::to_string(left) + " " + std::to_string(top) + " " +
                         std::to_string(side) + " leaves the " + std::to_string(frame.width) + "×" +
                         std::to_string(frame.height) + " frames of '" + path.string() + "'");
      }
    }
    ++*total_read;
    bar.Update(*total_read);
    if (i < o.skip || (i - o.skip) % o.stride != 0) continue;
    d.frames.resize(d.frames.size() + P);
    scaler.Scale(frame, left, top, side, o.size, d.frames.data() + d.frames.size() - P);
    d.source_index.push_back(first_index + i);
  }
  if (d.read == 0) throw FormatError("'" + path.string() + "' holds no frames");
  return d;
}

}  // namespace

ImportResult ImportDataset(const ImportOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  ValidateImportOptions(o);
  InterruptGuard interrupt_guard;
  // The system and its constraints, before any decoding: a bad description fails fast.
  const SystemDescription given = LoadSystemByName(o.system);
  const ControlMode control =
      o.control ? *o.control : (o.actions.empty() ? ControlMode::kNone : ControlMode::kFull);
  given.CheckControlMode(control);
  SystemDescription resolved = given;
  if (!given.Resolved()) {
    // Lengths left out are measured through the MJCF model and camera (as generate does).
    Environment env(given);
    resolved = env.ResolveConstraints(o.size);
    env.CheckConstraints(resolved, o.size, kConstraintTolerance);
  }
  resolved.ConstraintTerms();  // throws for anything unresolved
  std::vector<std::vector<double>> action_rows;
  if (!o.actions.empty()) action_rows = ReadActionsCsv(o.actions, given.nu());

  ImportResult result;
  ProgressBar bar("import", 0, "frames", o.progress && ::isatty(2));
  std::vector<DecodedInput> decoded;
  int64_t total_read = 0;
  for (const fs::path& in : o.inputs) {
    decoded.push_back(DecodeInput(in, o, total_read, bar, &total_read));
    const double dt0 = decoded.front().dt, dt = decoded.back().dt;
    if (std::abs(dt - dt0) > 1e-9 * dt0) {
      throw InputError("'" + in.string() + "' gives " + std::to_string(dt) +
                       " s between kept frames but '" + o.inputs.front().string() + "' gives " +
                       std::to_string(dt0) + " s: import inputs of one frame rate (or give --dt)");
    }
  }
  bar.Finish();
  result.frames_read = total_read;
  const double dt = decoded.front().dt;
  const size_t P = size_t(o.size) * o.size * 3;
  const int N = o.frames;
  // Runs: consecutive whole runs of each input.
  struct RunRef {
    size_t input;
    int64_t first;  // kept-frame index within the input
  };
  std::vector<RunRef> runs;
  for (size_t k = 0; k < decoded.size(); ++k) {
    const int64_t kept = int64_t(decoded[k].source_index.size());
    for (int64_t f = 0; f + N <= kept; f += N) runs.push_back({k, f});
  }
  const int R = int(runs.size());
  result.frames_dropped = total_read - int64_t(R) * N;
  if (R < 2) {
    throw InputError("the inputs give " + std::to_string(R) + " whole run(s) of " +
                     std::to_string(N) + " frames (" + std::to_string(total_read) +
                     " frames read, skip " + std::to_string(o.skip) + ", stride " +
                     std::to_string(o.stride) +
                     "); at least 2 are needed (training and validation): lower --frames, "
                     "--skip or --stride, or give more input");
  }
  // One action per run.
  const int nu = given.nu();
  std::vector<double> run_action(size_t(R) * nu, 0.0);
  if (!action_rows.empty()) {
    const int64_t rows = int64_t(action_rows.size());
    if (rows == total_read) {
      for (int r = 0; r < R; ++r) {
        const DecodedInput& d = decoded[runs[size_t(r)].input];
        const int64_t first = d.source_index[size_t(runs[size_t(r)].first)];
        for (int t = 0; t < N; ++t) {
          const int64_t s = d.source_index[size_t(runs[size_t(r)].first + t)];
          if (action_rows[size_t(s)] != action_rows[size_t(first)]) {
            throw InputError(
                "'" + o.actions.string() + "': the action changes within run " + std::to_string(r) +
                " (CSV row " + std::to_string(s + 1) + " differs from row " +
                std::to_string(first + 1) +
                "); the model takes one constant action per run (docs/method.md §7): cut the "
                "recording where the action changes, or give one row per run");
          }
        }
        for (int a = 0; a < nu; ++a) run_action[size_t(r) * nu + a] = action_rows[size_t(first)][a];
      }
    } else if (rows == R) {
      for (int r = 0; r < R; ++r) {
        for (int a = 0; a < nu; ++a) run_action[size_t(r) * nu + a] = action_rows[size_t(r)][a];
      }
    } else {
      throw InputError("'" + o.actions.string() + "' has " + std::to_string(rows) +
                       " rows of actions; expected one per input frame (" +
                       std::to_string(total_read) + ") or one per run (" + std::to_string(R) + ")");
    }
    if (control == ControlMode::kNone) {
      // "none" takes the all-zero CSV that export writes for an unactuated data set.
      for (double u : run_action) {
        if (u != 0.0) {
          throw InputError("--control none: the actions in '" + o.actions.string() +
                           "' are not all zero; give --control full (or under)");
        }
      }
    }
    if (control == ControlMode::kUnder) {
      for (int r = 0; r < R; ++r) {
        for (int a : given.under_zero) {
          if (run_action[size_t(r) * nu + a] != 0.0) {
            throw InputError("--control under: actuator " + std::to_string(a + 1) +
                             " must be zero, but run " + std::to_string(r) + " drives it");
          }
        }
      }
    }
  }

  DatasetHeader h;
  h.env = given.builtin ? *given.builtin : EnvName::kCustom;
  h.system = given.name;
  h.description = SystemToToml(resolved);
  h.control = control;
  h.runs = R;
  h.frames = N;
  h.size = o.size;
  h.nq = given.nq();
  h.nv = given.nv();
  h.nu = nu;
  h.dt = dt;
  h.has_state = false;
  h.source = "import";
  for (const fs::path& in : o.inputs) {
    h.source_files += (h.source_files.empty() ? "" : "\n") + fs::absolute(in).string();
  }
  AtomicFile out(o.out);
  {
    DatasetWriter writer(out.temp_path(), out.target(), h);
    std::vector<double> time(static_cast<size_t>(N)), action(size_t(N) * size_t(nu));
    for (int t = 0; t < N; ++t) time[size_t(t)] = (t + 1) * dt;  // as generated: frame 0 at dt
    for (int r = 0; r < R; ++r) {
      if (InterruptRequested()) throw Interrupted("import interrupted; nothing was written");
      const RunRef& ref = runs[size_t(r)];
      for (int t = 0; t < N; ++t) {
        for (int a = 0; a < nu; ++a) action[size_t(t) * nu + a] = run_action[size_t(r) * nu + a];
      }
      try {
        writer.WriteRun(hsize_t(r), decoded[ref.input].frames.data() + size_t(ref.first) * P,
                        time.data(), action.data(), nullptr, nullptr);
      } catch (const IoError& e) {
        throw IoError("data set '" + out.target().string() + "': " + e.what());
      }
    }
    if (!(writer.epsilon() > 0)) {
      throw InputError(
          "the imported frames never change (ε = 0, docs/method.md §8): there is "
          "no motion to learn from; check the inputs and --crop");
    }
    writer.Finish("none (imported)", "none (imported)", "none (imported)");
  }
  result.info = Dataset::Open(out.temp_path()).info();
  out.Commit();
  result.path = o.out;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

namespace {

// The shortest text that reads back as `v`.
std::string ShortestNumber(double v) {
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::vector<int64_t> ChosenRuns(const Dataset& data, const std::string& runs) {
  if (runs == "all") {
    std::vector<int64_t> all(size_t(data.info().runs));
    for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
    return all;
  }
  if (runs == "train") return data.TrainRuns();
  if (runs == "validation") return data.ValidationRuns();
  std::vector<int64_t> out;
  std::stringstream ss(runs);
  std::string cell;
  while (std::getline(ss, cell, ',')) {
    char* end = nullptr;
    const long v = std::strtol(cell.c_str(), &end, 10);
    if (cell.empty() || end != cell.c_str() + cell.size() || v < 0 || v >= data.info().runs) {
      throw InputError("--runs: '" + cell + "' is not a run of '" + data.path().string() +
                       "' (0 to " + std::to_string(data.info().runs - 1) +
                       "), nor all, train or validation");
    }
    out.push_back(v);
  }
  if (out.empty()) throw InputError("--runs names no run");
  return out;
}

}  // namespace

ExportResult ExportDataset(const ExportOptions& o) {
  if (o.scale < 1 || o.scale > 64) {
    throw InputError("--scale must be in [1, 64], got " + std::to_string(o.scale));
  }
  if (o.out.empty()) throw InputError("export: --out is required");
  // "frames/" names the folder "frames".
  fs::path out = o.out.lexically_normal();
  if (out.filename().empty()) out = out.parent_path();
  const Dataset data = Dataset::Open(o.data);
  const DatasetInfo& info = data.info();
  const std::vector<int64_t> runs = ChosenRuns(data, o.runs);
  const int S = info.size, W = S * o.scale;
  const bool png = !out.has_extension();
  std::error_code ec;
  if (png) {
    if (fs::exists(fs::symlink_status(out, ec))) {
      throw InputError("'" + out.string() + "' exists: export PNG frames into a new folder");
    }
  } else {
    std::string ext = out.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    if (ext != ".mp4" && ext != ".mkv" && ext != ".mov" && ext != ".m4v" && ext != ".avi") {
      throw InputError("'" + out.string() + "': H.264 goes into .mp4, .mkv, .mov, .m4v or " +
                       ".avi; give no extension for a folder of PNG frames");
    }
    CheckOutputPath(out, o.force, "video");
  }
  if (fs::equivalent(out, o.data, ec)) throw InputError("--out is the data set itself");
  if (!o.actions.empty()) {
    if (fs::equivalent(o.actions, o.data, ec) || o.actions.lexically_normal() == out) {
      throw InputError("--actions '" + o.actions.string() + "' is the data set or the output");
    }
    CheckOutputPath(o.actions, o.force, "CSV");
  }
  InterruptGuard interrupt_guard;
  ExportResult r;
  r.fps = 1.0 / info.dt;
  r.runs = int(runs.size());
  std::optional<VideoWriter> video;
  fs::path temp_dir;
  if (png) {
    // A folder of our own next to the target, renamed onto it when complete.
    const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
    fs::create_directories(parent);
    temp_dir = parent / (".keycld-" + std::to_string(::getpid()) + "-" + out.filename().string() +
                         ".partial");
    if (!fs::create_directory(temp_dir, ec) || ec) {
      throw IoError("cannot create '" + temp_dir.string() + "'" +
                    (ec ? ": " + ec.message() : std::string(" (it exists)")));
    }
  } else {
    video.emplace(out, W, W, r.fps, o.crf);
  }
  std::ostringstream csv;
  for (int a = 0; a < info.nu; ++a) csv << (a ? "," : "") << "u" << a + 1;
  csv << "\n";
  std::vector<uint8_t> big(size_t(W) * W * 3);
  try {
    for (int64_t run : runs) {
      if (InterruptRequested()) throw Interrupted("export interrupted; nothing was written");
      const std::vector<uint8_t> images = data.ReadImages(int(run));
      const std::vector<double> action = data.ReadAction(int(run));
      for (int t = 0; t < info.frames; ++t) {
        const uint8_t* f = images.data() + size_t(t) * S * S * 3;
        for (int y = 0; y < W; ++y) {
          for (int x = 0; x < W; ++x) {
            const uint8_t* p = f + (size_t(y / o.scale) * S + size_t(x / o.scale)) * 3;
            std::copy(p, p + 3, big.data() + (size_t(y) * W + x) * 3);
          }
        }
        if (video) {
          video->Add(big);
        } else {
          char name[32];
          std::snprintf(name, sizeof name, "frame_%06lld.png", static_cast<long long>(r.frames));
          WritePng(temp_dir / name, big, W, W);
        }
        for (int a = 0; a < info.nu; ++a) {
          csv << (a ? "," : "") << ShortestNumber(action[size_t(t) * info.nu + a]);
        }
        csv << "\n";
        ++r.frames;
      }
    }
    if (video) {
      video->Finish();
    } else {
      fs::rename(temp_dir, out);
    }
  } catch (...) {
    if (png) fs::remove_all(temp_dir);
    throw;
  }
  if (!o.actions.empty()) WriteTextAtomically(o.actions, csv.str());
  return r;
}

}  // namespace keycld
