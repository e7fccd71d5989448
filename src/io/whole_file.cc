#include "src/io/whole_file.h"

namespace shardpoint::internal_io {

bool ReadsWholeFiles(Storage* storage, const std::string& path) {
  auto* w = dynamic_cast<WholeFileRead*>(storage);
  return w != nullptr && w->ReadsWholeFiles(path);
}

Result<std::optional<std::string>> ReadFileIfPresent(Storage* storage, const std::string& path) {
  if (ReadsWholeFiles(storage, path)) {
    return dynamic_cast<WholeFileRead*>(storage)->ReadWholeFile(path);
  }
  SP_ASSIGN_OR_RETURN(bool exists, storage->Exists(path));
  if (!exists) return std::optional<std::string>();
  SP_ASSIGN_OR_RETURN(std::string data, storage->ReadFileToString(path));
  return std::optional<std::string>(std::move(data));
}

}  // namespace shardpoint::internal_io
