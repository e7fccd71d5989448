// The conversions of a source the door has opened
// (src/source/mapped_source.h): ExportHf, ConvertHfToShardpoint and Convert
// open their source once and call these.
#pragma once

#include <chrono>
#include <string>

#include "shardpoint/hf_export.h"
#include "shardpoint/hf_mapping.h"
#include "src/io/resources.h"
#include "src/source/mapped_source.h"

namespace shardpoint::internal_convert {

// `src` as an HF model at `out_dir` (ExportHf). `start`: when the call began,
// for ExportHfStats::seconds.
Result<ExportHfStats> ExportSourceToHf(const internal_source::MappedSource& src,
                                       const std::string& out_dir, const HfMapping& mapping,
                                       const ExportHfOptions& options,
                                       internal_io::CallResources& res,
                                       std::chrono::steady_clock::time_point start);

// `src` as a shardpoint checkpoint at `ckpt_dir` (ConvertHfToShardpoint).
Result<ExportHfStats> ConvertSourceToShardpoint(const internal_source::MappedSource& src,
                                                const std::string& ckpt_dir,
                                                const HfMapping& mapping,
                                                const ExportHfOptions& options,
                                                internal_io::CallResources& res,
                                                std::chrono::steady_clock::time_point start);

}  // namespace shardpoint::internal_convert
