// Reading and writing schedule files by format (schedule_io.hpp).
#include "model/formats/schedule_io.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "model/errors.hpp"
#include "model/formats/schedule_json.hpp"

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

// The whole file as bytes. fopen/fread report a directory or a missing file through errno.
std::string read_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) file_error(path, std::string("cannot open the file: ") + std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  while (true) {
    const size_t n = std::fread(buf, 1, sizeof buf, f.get());
    text.append(buf, n);
    if (n < sizeof buf) break;
  }
  if (std::ferror(f.get())) file_error(path, std::string("cannot read the file: ") + std::strerror(errno));
  return text;
}

}  // namespace

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
                            const CsvReadOptions& csv) {
  const FileFormat f = format ? *format : format_from_path(path);
  const std::string text = read_file(path);
  return f == FileFormat::Json ? read_schedule_json(text, path) : read_pytorch_csv(text, path, csv);
}

std::string write_schedule(const Schedule& s, FileFormat format, CsvKind csv_kind) {
  return format == FileFormat::Json ? write_schedule_json(s) : write_pytorch_csv(s, csv_kind);
}

}  // namespace ppsched
