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
  if (aborted.ok()) return "";
  return "aborting the uploads a crashed writer left open under '" + dir +
         "' failed (a bucket lifecycle rule removes them): " + aborted.status().ToString();
}

}  // namespace shardpoint::internal_io
