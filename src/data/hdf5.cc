#include "hdf5.h"

#include <cctype>
#include <cstdlib>
#include <cstring>

namespace keycld::h5 {

namespace {

// HDF5 closes whatever is still open when the process exits; after a failed write (a full
// disk) that close walks half-released objects and crashes. keycld closes every object itself
// (RAII), so the exit handler is not installed. Must run before the first HDF5 call.
const bool kNoExitHandler = H5dont_atexit() >= 0;

herr_t FindErrno(unsigned, const H5E_error2_t* e, void* result) {
  if (e->desc == nullptr) return 0;
  if (const char* p = std::strstr(e->desc, "errno = ")) {
    const int err = std::atoi(p + 8);
    if (err > 0) *static_cast<int*>(result) = err;
  }
  return 0;
}

}  // namespace

void Quiet() {
  (void)kNoExitHandler;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

int LastErrno() {
  int err = 0;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, FindErrno, &err);
  return err;
}

void WriteAttr(hid_t obj, const char* name, const std::string& value) {
  // Variable-length UTF-8, which h5py returns as str.
  Id type = Check(H5Tcopy(H5T_C_S1), "H5Tcopy");
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  Id space = Check(H5Screate(H5S_SCALAR), "H5Screate");
  Id attr = Check(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT),
                  std::string("cannot create attribute ") + name);
  const char* data = value.c_str();
  Check(H5Awrite(attr, type, &data), std::string("cannot write attribute ") + name, 0);
}

void WriteAttr(hid_t obj, const char* name, int64_t value) {
  Id space = Check(H5Screate(H5S_SCALAR), "H5Screate");
  Id attr = Check(H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT),
                  std::string("cannot create attribute ") + name);
  Check(H5Awrite(attr, H5T_NATIVE_INT64, &value), std::string("cannot write attribute ") + name, 0);
}

void WriteAttr(hid_t obj, const char* name, double value) {
  Id space = Check(H5Screate(H5S_SCALAR), "H5Screate");
  Id attr = Check(H5Acreate2(obj, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT),
                  std::string("cannot create attribute ") + name);
  Check(H5Awrite(attr, H5T_NATIVE_DOUBLE, &value), std::string("cannot write attribute ") + name,
        0);
}

bool HasAttr(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

namespace {
Id OpenAttr(hid_t obj, const char* name, const std::string& file) {
  if (!HasAttr(obj, name)) {
    throw FormatError(file + ": attribute '" + name + "' is missing");
  }
  return Check<FormatError>(H5Aopen(obj, name, H5P_DEFAULT),
                            file + ": cannot open attribute '" + name + "'");
}
}  // namespace

std::string ReadStringAttr(hid_t obj, const char* name, const std::string& file) {
  Id attr = OpenAttr(obj, name, file);
  Id type = Check<FormatError>(H5Aget_type(attr), file + ": attribute type");
  if (H5Tget_class(type) != H5T_STRING) {
    throw FormatError(file + ": attribute '" + std::string(name) + "' is not a string");
  }
  if (H5Tis_variable_str(type) > 0) {
    char* s = nullptr;
    Id mem = Check(H5Tcopy(H5T_C_S1), "H5Tcopy");
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));
    Check<FormatError>(H5Aread(attr, mem, &s), file + ": cannot read attribute " + name, 0);
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  size_t n = H5Tget_size(type);
  std::string buf(n, '\0');
  Check<FormatError>(H5Aread(attr, type, buf.data()), file + ": cannot read attribute " + name, 0);
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}

int64_t ReadIntAttr(hid_t obj, const char* name, const std::string& file) {
  Id attr = OpenAttr(obj, name, file);
  Id type = Check<FormatError>(H5Aget_type(attr), file + ": attribute type");
  if (H5Tget_class(type) != H5T_INTEGER) {
    throw FormatError(file + ": attribute '" + std::string(name) + "' is not an integer");
  }
  int64_t v = 0;
  Check<FormatError>(H5Aread(attr, H5T_NATIVE_INT64, &v), file + ": cannot read " + name, 0);
  return v;
}

double ReadDoubleAttr(hid_t obj, const char* name, const std::string& file) {
  Id attr = OpenAttr(obj, name, file);
  Id type = Check<FormatError>(H5Aget_type(attr), file + ": attribute type");
  if (H5Tget_class(type) != H5T_FLOAT && H5Tget_class(type) != H5T_INTEGER) {
    throw FormatError(file + ": attribute '" + std::string(name) + "' is not a number");
  }
  double v = 0;
  Check<FormatError>(H5Aread(attr, H5T_NATIVE_DOUBLE, &v), file + ": cannot read " + name, 0);
  return v;
}

Id CreateDataset(hid_t parent, const char* name, hid_t type, const std::vector<hsize_t>& dims,
                 const std::vector<hsize_t>& chunk, int deflate) {
  Id space = Check(H5Screate_simple(int(dims.size()), dims.data(), nullptr), "H5Screate_simple");
  Id dcpl = Check(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate");
  H5Pset_obj_track_times(dcpl, false);
  if (!chunk.empty()) {
    H5Pset_chunk(dcpl, int(chunk.size()), chunk.data());
    if (deflate > 0) H5Pset_deflate(dcpl, unsigned(deflate));
  }
  return Check(H5Dcreate2(parent, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
               std::string("cannot create dataset ") + name);
}

void WriteSlab(hid_t dataset, hid_t mem_type, const void* data, const std::vector<hsize_t>& offset,
               const std::vector<hsize_t>& count, const std::string& what) {
  Id file_space = Check(H5Dget_space(dataset), "H5Dget_space");
  Check(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, offset.data(), nullptr, count.data(),
                            nullptr),
        what + ": bad hyperslab", 0);
  Id mem_space = Check(H5Screate_simple(int(count.size()), count.data(), nullptr), "H5Screate");
  if (H5Dwrite(dataset, mem_type, mem_space, file_space, H5P_DEFAULT, data) < 0) {
    const int err = LastErrno();
    throw IoError("cannot write " + what + ": " +
                  (err != 0 ? ErrnoText(err) : std::string("HDF5 write failed")));
  }
}

void ReadSlab(hid_t dataset, hid_t mem_type, void* data, const std::vector<hsize_t>& offset,
              const std::vector<hsize_t>& count, const std::string& what) {
  Id file_space = Check<FormatError>(H5Dget_space(dataset), what + ": no dataspace");
  Check<FormatError>(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, offset.data(), nullptr,
                                         count.data(), nullptr),
                     what + ": bad hyperslab", 0);
  Id mem_space = Check(H5Screate_simple(int(count.size()), count.data(), nullptr), "H5Screate");
  Check<FormatError>(H5Dread(dataset, mem_type, mem_space, file_space, H5P_DEFAULT, data),
                     "cannot read " + what + " (truncated or corrupt file?)", 0);
}

std::vector<hsize_t> Dims(hid_t dataset) {
  Id space = Check<FormatError>(H5Dget_space(dataset), "H5Dget_space");
  int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) throw FormatError("bad dataspace");
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return dims;
}

}  // namespace keycld::h5
