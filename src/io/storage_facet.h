// Finding an internal facet of a Storage (an interface such as
// PreferredReadSize or HeldCompletes that a Storage also derives from, so
// that the public Storage interface needs no change) through any
// StorageWrapper layers around it.
#pragma once

#include "shardpoint/storage.h"

namespace shardpoint::internal_io {

// The first layer of `storage` (outermost first) that is a T, or null.
template <class T>
T* FindFacet(Storage* storage) {
  while (storage != nullptr) {
    if (auto* t = dynamic_cast<T*>(storage)) return t;
    auto* w = dynamic_cast<StorageWrapper*>(storage);
    storage = w != nullptr ? w->base() : nullptr;
  }
  return nullptr;
}

}  // namespace shardpoint::internal_io
