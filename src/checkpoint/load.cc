// Load: the collective that fills every rank's state from a shardpoint
// checkpoint or a PyTorch DCP directory.
//
//   1. rank 0 decides what `dir` is and reads its index (the manifest, or
//      for a PyTorch DCP directory the index src/dcp/ builds: its chunks carry
//      no checksums, so none are verified) and broadcasts its bytes or its
//      error; all decode them (src/source/open_source.h);
//                                                             (broadcast)
//      a sharded manifest (format v3): rank 0 broadcasts the index and
//      each rank gets the shards of its keys (src/checkpoint/manifest_fetch.h);
//   2. that index is the Source of the load pipeline (load_source.h):
//      requests, unexpected keys, plan, reads and objects; a decoding error
//      goes into its first all-gather.
#include <chrono>

#include "shardpoint/checkpoint.h"
#include "src/base/guard.h"
#include "src/checkpoint/load_source.h"
#include "src/checkpoint/manifest_fetch.h"
#include "src/comm/agreed.h"
#include "src/source/open_source.h"

namespace shardpoint {
namespace {

Result<LoadResult> LoadCollective(State& state, const std::string& dir, Comm& comm,
                                  const LoadOptions& options, internal_io::CallResources& res) {
  const auto start = std::chrono::steady_clock::now();
  Storage* storage = res.storage();

  // 1. The manifest, read once.
  std::string bytes;
  Status s;
  if (comm.rank() == 0) {
    Result<std::string> read = internal_base::Guarded("load: reading the manifest", [&] {
      return internal_source::ReadSourceBytes(storage, dir);
    });
    s = read.status();
    if (read.ok()) bytes = std::move(*read);
  }
  SP_RETURN_IF_ERROR(internal_comm::BroadcastAgreed(comm, s, &bytes, 0));
  const bool dcp = !bytes.empty() && bytes[0] == 'D';
  // A sharded manifest (format v3): each rank gets only its keys' shards,
  // each read once (manifest_fetch.h).
  internal_checkpoint::FetchStats fetched;
  Status collective;
  Result<internal_source::Source> src =
      internal_checkpoint::IsShardedIndex(bytes)
          ? internal_checkpoint::FetchShardedSource(bytes, dir, state, options.cooperative, comm,
                                                    storage, &fetched, &collective)
          : internal_base::Guarded("load: decoding the manifest",
                                   [&] { return internal_source::DecodeSource(bytes, dir); });
  SP_RETURN_IF_ERROR(collective);
  bytes.clear();

  // 2. The pipeline (a rank that failed to decode passes its error into the
  // pipeline's first all-gather, which every rank then returns).
  const internal_source::Source none = internal_source::EmptySource(dir, dcp);
  SP_ASSIGN_OR_RETURN(LoadResult result,
                      internal_checkpoint::LoadFromSource(
                          state, src.status(), src.ok() ? *src : none, comm, options, res, "load"));
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
