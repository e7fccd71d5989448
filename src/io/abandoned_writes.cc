#include "src/io/abandoned_writes.h"

#include "src/base/guard.h"
#include "src/io/storage_facet.h"

namespace shardpoint::internal_io {

AbandonedWrites* FindAbandonedWrites(Storage* storage) {
  return FindFacet<AbandonedWrites>(storage);
}

std::string AbortAbandonedWritesUnder(Storage* storage, const std::string& dir,
                                      const AbandonedWrites::Which& which) {
  AbandonedWrites* a = FindAbandonedWrites(storage);
  if (a == nullptr) return "";
  Result<uint64_t> aborted = internal_base::Guarded(
      "aborting open uploads under '" + dir + "'",
      [&]() -> Result<uint64_t> { return a->AbortAbandonedWrites(dir, which); });
  return aborted.ok() ? "" : aborted.status().ToString();
}

}  // namespace shardpoint::internal_io
