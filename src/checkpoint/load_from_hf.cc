// LoadFromHf: a sharded load whose source is an HF model.
//
//   1. rank 0 reads the safetensors headers, config.json and the index
//      through the door (src/source/mapped_source.h) and broadcasts them, or
//      its error (one collective); every rank decodes and maps them there to
//      a Source whose chunks point into the HF files (no checksums, no
//      objects);
//   2. the load pipeline (src/checkpoint/load_source.h) does the rest, as
//      for Load: requests, unexpected keys, plan, reads; a decoding or
//      mapping error goes into its first all-gather.
#include <chrono>

#include "shardpoint/hf_load.h"
#include "src/base/guard.h"
#include "src/checkpoint/load_source.h"
#include "src/comm/agreed.h"
#include "src/source/mapped_source.h"

using shardpoint::internal_base::Guarded;
using shardpoint::internal_checkpoint::LoadFromSource;
using shardpoint::internal_checkpoint::LogLoadOutcome;
using shardpoint::internal_comm::BroadcastAgreed;
using shardpoint::internal_hf::MappedKey;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_source::DecodeHfSource;
using shardpoint::internal_source::MappedSource;
using shardpoint::internal_source::OpenSource;
using shardpoint::internal_source::ReadHfSourceBytes;

namespace shardpoint {

namespace {

Result<LoadResult> LoadFromHfCollective(State& state, const std::string& hf_dir,
                                        const HfMapping& mapping, Comm& comm,
                                        const HfLoadOptions& options, CallResources& res) {
  const auto start = std::chrono::steady_clock::now();
  Storage* storage = res.storage();

  // 1. Headers, read once and broadcast; every rank maps them.
  std::string blob;
  Status s;
  if (comm.rank() == 0) {
    Result<std::string> r =
        Guarded("HF load: reading headers", [&] { return ReadHfSourceBytes(storage, hf_dir); });
    s = r.status();
    if (r.ok()) blob = std::move(*r);
  }
  SP_RETURN_IF_ERROR(BroadcastAgreed(comm, s, &blob, 0));
  Result<MappedSource> src = Guarded(
      "HF load: mapping", [&] { return DecodeHfSource(blob, hf_dir, mapping, options.variables); });
  blob.clear();

  // 2. The load pipeline, as Load's (a mapping error goes into its first
  // all-gather).
  const MappedSource none;
  SP_ASSIGN_OR_RETURN(LoadResult result, LoadFromSource(state, src.status(), src.ok() ? *src : none,
                                                        comm, options.load, res, "HF load"));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace

// Every local step is Guarded; this catches what a collective call throws.
Result<LoadResult> LoadFromHf(State& state, const std::string& hf_dir, const HfMapping& mapping,
                              Comm& comm, const HfLoadOptions& options) {
  CallResources res(options.load);
  Result<LoadResult> result = Guarded(
      "HF load", [&] { return LoadFromHfCollective(state, hf_dir, mapping, comm, options, res); });
  LogLoadOutcome(res, comm, "HF model '" + hf_dir + "'", result);
  return result;
}

Result<std::vector<HfKeyInfo>> DescribeHf(const std::string& hf_dir, const HfMapping& mapping,
                                          const HfOptions& options) {
  CallResources res(options);
  SP_ASSIGN_OR_RETURN(MappedSource src, OpenSource(res.storage(), hf_dir, CheckpointKind::kHfModel,
                                                   mapping, options.variables));
  std::vector<HfKeyInfo> out;
  for (MappedKey& mk : src.mapped) out.push_back(std::move(mk.info));
  return out;
}

}  // namespace shardpoint
