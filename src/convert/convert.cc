// Convert: the direction chosen by what the source is, which the door
// decides once when it opens it.
#include <chrono>

#include "shardpoint/hf_export.h"
#include "src/convert/convert_source.h"
#include "src/convert/stream.h"
#include "src/source/mapped_source.h"

using shardpoint::internal_convert::ConvertSourceToShardpoint;
using shardpoint::internal_convert::ExportSourceToHf;
using shardpoint::internal_convert::RunConversion;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_source::MappedSource;
using shardpoint::internal_source::OpenSource;

namespace shardpoint {

Result<ExportHfStats> Convert(const std::string& src_dir, const std::string& dst,
                              const HfMapping& mapping, const ExportHfOptions& options) {
  return RunConversion(
      "convert", src_dir, dst, options, [&](CallResources& res) -> Result<ExportHfStats> {
        const auto start = std::chrono::steady_clock::now();
        SP_ASSIGN_OR_RETURN(MappedSource src,
                            OpenSource(res.storage(), src_dir, mapping, options.variables));
        if (src.checkpoint_kind == CheckpointKind::kShardpoint) {
          return ExportSourceToHf(src, dst, mapping, options, res, start);
        }
        return ConvertSourceToShardpoint(src, dst, mapping, options, res, start);
      });
}

}  // namespace shardpoint
