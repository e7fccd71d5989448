// The convenience methods of Storage, written once over the virtual interface
// so every implementation (POSIX, memory, fault injection) shares them.
#include "shardpoint/storage.h"

#include <limits>

namespace shardpoint {

Result<std::string> Storage::ReadFileToString(const std::string& path) {
  SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, NewReadableFile(path));
  SP_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  if (size > std::numeric_limits<size_t>::max()) {
    return InvalidArgumentError("file " + path + ": " + std::to_string(size) +
                                " bytes do not fit in memory");
  }
  std::string data(static_cast<size_t>(size), '\0');
  SP_RETURN_IF_ERROR(file->ReadAt(0, data.size(), data.data()));
  return data;
}

Status Storage::WriteStringToFile(const std::string& path, const std::string& data) {
  SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                      NewWritableFile(path, WriteFileOptions{}));
  SP_RETURN_IF_ERROR(file->WriteAt(0, data.data(), data.size()));
  SP_RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

Status Storage::CommitFile(const std::string& path, const std::string& data, bool exclusive) {
  if (exclusive) {
    SP_ASSIGN_OR_RETURN(bool exists, Exists(path));
    if (exists) return FailedPreconditionError("'" + path + "' already exists");
  }
  const std::string tmp = path + ".tmp";
  SP_RETURN_IF_ERROR(WriteStringToFile(tmp, data));
  SP_RETURN_IF_ERROR(Rename(tmp, path));
  const size_t slash = path.find_last_of('/');
  return SyncDir(slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash));
}

Result<bool> Storage::Exchange(const std::string&, const std::string&) { return false; }

}  // namespace shardpoint
