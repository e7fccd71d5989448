// Writes one rank's data file: large sequential writes from aligned staging
// buffers, checksumming every item on the way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardpoint/storage.h"
#include "src/geometry/view.h"
#include "src/io/thread_pool.h"
#include "src/plan/save_plan.h"

namespace shardpoint::internal_checkpoint {

struct WriterOptions {
  size_t staging_bytes = size_t{8} << 20;  // per buffer; rounded up to 4096
  int buffers = 3;                         // in rotation: fill one while others write
  bool direct = true;
  bool reserve = true;  // WritableFile::Reserve the file's size before writing
  // Also checksum every block of this many bytes of each tensor chunk (format
  // v2 block checksums); 0: none.
  uint64_t block_size = 0;
};

// Writes rf.header followed by every item's bytes (gathered from sources[i],
// row-major) to `path`, fsyncs and closes it. Returns one checksum per item;
// with options.block_size, fills *block_sums with the block checksums of
// each tensor item (none for objects).
// REQUIRES: sources.size() == rf.items.size(); each item starts at a multiple
// of its element size (PlanSave orders them so).
Result<std::vector<uint64_t>> WriteDataFile(Storage* storage, const std::string& path,
                                            const internal_plan::RankFile& rf,
                                            const std::vector<internal_geometry::View>& sources,
                                            ThreadPool* pool, const WriterOptions& options,
                                            std::vector<std::vector<uint64_t>>* block_sums);

}  // namespace shardpoint::internal_checkpoint
