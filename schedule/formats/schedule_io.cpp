// Reading and writing schedule files by format (schedule_io.hpp).
#include "schedule/formats/schedule_io.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sys/stat.h>

#include "schedule/comm_insertion.hpp"
#include "schedule/errors.hpp"
#include "schedule/validate.hpp"
#include "schedule/formats/schedule_json.hpp"

namespace ppsched {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

[[noreturn]] void file_error(const std::string& path, const std::string& msg) {
  Location loc;
  loc.file = path;
  throw InputError(loc, msg);
}

}  // namespace

std::string read_input_file(const std::string& path, uint64_t max_bytes) {
  // Refused before a byte is read: a device or FIFO has no end (or blocks), and a file over
  // the limit cannot be an input ppsched handles within its memory promise.
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) file_error(path, std::string("cannot open the file: ") + std::strerror(errno));
  if (S_ISDIR(info.st_mode)) file_error(path, "cannot read the file: it is a directory");
  if (!S_ISREG(info.st_mode))
    file_error(path, "cannot read the file: not a regular file (a device, FIFO or socket); give a file");
  if (static_cast<uint64_t>(info.st_size) > max_bytes)
    file_error(path, "the file is " + std::to_string(info.st_size) + " bytes, over the limit of " +
                         std::to_string(max_bytes) + " bytes for this kind of input file");
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) file_error(path, std::string("cannot open the file: ") + std::strerror(errno));
  // Straight into the string (no staging copy); then on, in case the file grew since stat().
  std::string text(static_cast<size_t>(info.st_size), '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f.get()));
  char buf[1 << 16];
  bool more = text.size() == static_cast<size_t>(info.st_size);  // a short read: the end came early
  while (more) {
    const size_t n = std::fread(buf, 1, sizeof buf, f.get());
    text.append(buf, n);
    // The file may have grown since stat(): the limit holds for what is read, too.
    if (text.size() > max_bytes)
      file_error(path, "the file is over the limit of " + std::to_string(max_bytes) + " bytes");
    if (n < sizeof buf) break;
  }
  if (std::ferror(f.get())) file_error(path, std::string("cannot read the file: ") + std::strerror(errno));
  return text;
}

FileFormat format_from_path(const std::string& path) {
  const std::string ext = lower(std::filesystem::path(path).extension().string());
  if (ext == ".json") return FileFormat::Json;
  if (ext == ".csv") return FileFormat::Csv;
  file_error(path,
             (ext.empty() ? std::string("the file name has no extension") : "unknown extension '" + ext + "'") +
                 ": expected .json (ppsched schedule) or .csv (PyTorch pipelining CSV)");
}

FileFormat format_from_name(const std::string& name) {
  const std::string n = lower(name);
  if (n == "json") return FileFormat::Json;
  if (n == "csv") return FileFormat::Csv;
  throw InputError({}, "unknown schedule format '" + name + "': expected json or csv");
}

Schedule read_schedule_file(const std::string& path, std::optional<FileFormat> format,
                            const CsvReadOptions& csv, std::optional<CsvKind>* csv_kind, int64_t* inserted_p2p) {
  const FileFormat f = format ? *format : format_from_path(path);
  const std::string text = read_input_file(path);
  if (inserted_p2p) *inserted_p2p = 0;
  if (f == FileFormat::Json) {
    Schedule s = read_schedule_json(text, path);
    // The CSV reader's rule (a compute-only order gets its P2P steps from the column scan);
    // errors of the scan name this file.
    int64_t n = 0;
    try {
      n = insert_p2p_if_compute_only(s);
      if (n > 0) validate_structure(s, path);
    } catch (const InputError& e) {
      Location loc = e.where();
      loc.file = path;
      throw InputError(std::move(loc), e.message());
    }
    if (inserted_p2p) *inserted_p2p = n;
    return s;
  }
  CsvKind kind = CsvKind::ComputeOnly;
  Schedule s = read_pytorch_csv(text, path, csv, &kind, inserted_p2p);
  if (csv_kind) *csv_kind = kind;
  return s;
}

std::string write_schedule(const Schedule& s, FileFormat format, CsvKind csv_kind) {
  return format == FileFormat::Json ? write_schedule_json(s) : write_pytorch_csv(s, csv_kind);
}

}  // namespace ppsched
