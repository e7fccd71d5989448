#include "src/io/held_completes.h"

#include "src/io/storage_facet.h"

namespace shardpoint::internal_io {

HeldCompletes* FindHeldCompletes(Storage* storage, const std::string& path) {
  HeldCompletes* h = FindFacet<HeldCompletes>(storage);
  return h != nullptr && !dynamic_cast<Storage*>(h)->SupportsRename(path) ? h : nullptr;
}

}  // namespace shardpoint::internal_io
