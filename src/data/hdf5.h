// Small RAII layer over the HDF5 C API, private to keycld's data layer.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "keycld/util/error.h"

namespace keycld::h5 {

/// Owns one hid_t and closes it with H5Idec_ref.
class Id {
 public:
  Id() = default;
  explicit Id(hid_t id) : id_(id) {}
  Id(Id&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      Reset();
      id_ = o.id_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { Reset(); }
  void Reset() {
    if (id_ >= 0) H5Idec_ref(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t get() const { return id_; }
  /// Gives up ownership (the caller closes the id).
  hid_t Release() {
    hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }
  bool valid() const { return id_ >= 0; }
  operator hid_t() const { return id_; }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

/// Turns off HDF5's own error printing (errors become exceptions with our messages).
void Quiet();
/// The errno that HDF5's file driver recorded for the failure on the current error stack
/// (e.g. ENOSPC for a full disk), or 0 if none was recorded.
int LastErrno();

/// Throws `E` with `what` if id < 0; returns the owning Id otherwise.
template <typename E = IoError>
Id Check(hid_t id, const std::string& what) {
  if (id < 0) throw E(what);
  return Id(id);
}
template <typename E = IoError>
void Check(herr_t status, const std::string& what, int) {
  if (status < 0) throw E(what);
}

void WriteAttr(hid_t obj, const char* name, const std::string& value);
void WriteAttr(hid_t obj, const char* name, int64_t value);
void WriteAttr(hid_t obj, const char* name, double value);
bool HasAttr(hid_t obj, const char* name);
/// Read an attribute; FormatError("<file>: attribute <name> ...") if missing or mistyped.
std::string ReadStringAttr(hid_t obj, const char* name, const std::string& file);
int64_t ReadIntAttr(hid_t obj, const char* name, const std::string& file);
double ReadDoubleAttr(hid_t obj, const char* name, const std::string& file);

/// Creates a dataset of `type` with `dims`, chunked by `chunk` (empty = contiguous), gzip
/// level `deflate` (0 = none), without object timestamps (byte-reproducible files).
Id CreateDataset(hid_t parent, const char* name, hid_t type, const std::vector<hsize_t>& dims,
                 const std::vector<hsize_t>& chunk, int deflate);

/// Writes `data` into the hyperslab starting at `offset` with extent `count`.
void WriteSlab(hid_t dataset, hid_t mem_type, const void* data,
               const std::vector<hsize_t>& offset, const std::vector<hsize_t>& count,
               const std::string& what);
/// Reads the hyperslab into `data` (caller sizes it).
void ReadSlab(hid_t dataset, hid_t mem_type, void* data, const std::vector<hsize_t>& offset,
              const std::vector<hsize_t>& count, const std::string& what);

/// Dimensions of a dataset.
std::vector<hsize_t> Dims(hid_t dataset);

}  // namespace keycld::h5
