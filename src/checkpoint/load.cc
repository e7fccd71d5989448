// Load: the collective that fills every rank's state from a shardpoint
// checkpoint or a PyTorch DCP directory.
//
//   1. rank 0 reads the manifest and broadcasts its bytes or its error; all
//      decode (for a PyTorch DCP directory, the index src/dcp/ builds from it
//      instead: its chunks carry no checksums, so none are verified);
//                                                             (broadcast)
//   2. that index is the Source of the load pipeline (load_source.h):
//      requests, unexpected keys, plan, reads and objects; a decoding error
//      goes into its first all-gather.
#include <chrono>

#include "shardpoint/checkpoint.h"
#include "shardpoint/checkpoint_kind.h"
#include "src/base/guard.h"
#include "src/checkpoint/commit.h"
#include "src/checkpoint/load_source.h"
#include "src/comm/agreed.h"
#include "src/dcp/dcp_dir.h"

namespace shardpoint {
namespace {

// The manifest of `dir` as 'S' + its bytes, or for a DCP directory 'D' + the
// encoding of the index built from it.
Result<std::string> ReadIndexBytes(Storage* storage, const std::string& dir) {
  SP_ASSIGN_OR_RETURN(CheckpointKind kind, DetectCheckpointKind(dir, storage));
  if (kind == CheckpointKind::kPyTorchDcp) {
    SP_ASSIGN_OR_RETURN(internal_dcp::DcpIndex idx, internal_dcp::ReadDcpIndex(storage, dir));
    return "D" + internal_dcp::EncodeDcpIndex(idx.m, idx.views);
  }
  SP_ASSIGN_OR_RETURN(std::string bytes, internal_checkpoint::ReadManifestBytes(storage, dir));
  return "S" + bytes;
}

Result<LoadResult> LoadCollective(State& state, const std::string& dir, Comm& comm,
                                  const LoadOptions& options, internal_io::CallResources& res) {
  const auto start = std::chrono::steady_clock::now();
  Storage* storage = res.storage();

  // 1. The manifest, read once.
  std::string bytes;
  Status s;
  if (comm.rank() == 0) {
    Result<std::string> read = internal_base::Guarded("load: reading the manifest",
                                                      [&] { return ReadIndexBytes(storage, dir); });
    s = read.status();
    if (read.ok()) bytes = std::move(*read);
  }
  SP_RETURN_IF_ERROR(internal_comm::BroadcastAgreed(comm, s, &bytes, 0));
  const bool dcp = !bytes.empty() && bytes[0] == 'D';
  std::vector<internal_source::StridedView> views;
  Result<internal_format::Manifest> manifest = internal_base::Guarded(
      "load: decoding the manifest", [&]() -> Result<internal_format::Manifest> {
        if (!dcp) {
          return internal_format::DecodeManifest(
              std::string_view(bytes).substr(1),
              internal_checkpoint::JoinPath(dir, internal_format::kManifestName));
        }
        SP_ASSIGN_OR_RETURN(internal_dcp::DcpTransitIndex idx,
                            internal_dcp::DecodeDcpIndex(std::string_view(bytes).substr(1), dir));
        views = std::move(idx.views);
        return std::move(idx.m);
      });
  bytes.clear();

  // 2. The pipeline (a rank that failed to decode passes its error into the
  // pipeline's first all-gather, which every rank then returns).
  internal_source::Source src;
  src.dir = dir;
  src.kind = "checkpoint";
  src.name = "checkpoint '" + dir + "'";
  src.has_checksums = !dcp;
  src.views = std::move(views);
  if (manifest.ok()) src.index = std::move(*manifest);
  SP_ASSIGN_OR_RETURN(LoadResult result,
                      internal_checkpoint::LoadFromSource(state, manifest.status(), src, comm,
                                                          options, res, "load"));
  result.bytes_persistent = result.bytes_read;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace

// Every local step is Guarded (its exception goes through the agreement that
// follows); this catches what a collective call itself throws.
Result<LoadResult> Load(State& state, const std::string& dir, Comm& comm,
                        const LoadOptions& options) {
  internal_io::CallResources res(options);
  Result<LoadResult> result = internal_base::Guarded(
      "load", [&] { return LoadCollective(state, dir, comm, options, res); });
  internal_checkpoint::LogLoadOutcome(res, comm, "checkpoint '" + dir + "'", result);
  return result;
}

}  // namespace shardpoint
