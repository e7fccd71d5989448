// A row-major range of one box of a source's tensor, read through the load
// planner and reader: what every conversion and diff reads with.
#pragma once

#include <cstdint>
#include <string>

#include "shardpoint/box.h"
#include "shardpoint/dtype.h"
#include "shardpoint/status.h"
#include "src/checkpoint/reader.h"
#include "src/source/source.h"

namespace shardpoint::internal_convert {

// Reads the row-major elements [begin, end) of box `box` of tensor `key` into
// contiguous `dst` as `dtype` (converting). Checksums are verified for stored
// chunks read whole (shardpoint sources only).
Status ReadBoxRange(const internal_source::Source& src, internal_checkpoint::DataFiles* files,
                    const std::string& key, const Box& box, int64_t begin, int64_t end, DType dtype,
                    char* dst);

}  // namespace shardpoint::internal_convert
