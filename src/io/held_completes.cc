#include "src/io/held_completes.h"

namespace shardpoint::internal_io {

HeldCompletes* FindHeldCompletes(Storage* storage, const std::string& path) {
  while (storage != nullptr) {
    if (auto* h = dynamic_cast<HeldCompletes*>(storage)) {
      return storage->SupportsRename(path) ? nullptr : h;
    }
    auto* w = dynamic_cast<StorageWrapper*>(storage);
    storage = w != nullptr ? w->base() : nullptr;
  }
  return nullptr;
}

}  // namespace shardpoint::internal_io
