// LoadFromHf: a sharded load whose source is an HF model.
//
//   1. rank 0 reads the safetensors headers, config.json and the index and
//      broadcasts them (one collective); every rank decodes and maps them to
//      a manifest whose chunks point into the HF files;
//   2. requests are checked like Load (missing, unexpected, dtype, shape);
//   3. every rank plans and reads only the byte runs of its own boxes.
#include <algorithm>
#include <atomic>
#include <chrono>

#include "shardpoint/hf.h"
#include "src/base/guard.h"
#include "src/checkpoint/requests.h"
#include "src/hf/source.h"
#include "src/plan/load_plan.h"

namespace shardpoint {

using namespace internal;

namespace {

Status CheckRequests(const Manifest& m, const State& state, const HfLoadOptions& o,
                     std::vector<std::string>* missing, std::string* wanted) {
  wanted->assign(m.tensors.size(), '\0');
  for (const LocalTensor& lt : state.tensors) {
    for (const Segment& seg : lt.segments) {
      const int64_t t = m.FindTensor(seg.key);
      if (t < 0) {
        missing->push_back(seg.key);
        continue;
      }
      (*wanted)[t] = 1;
      const TensorRecord& rec = m.tensors[t];
      if (rec.dtype != lt.dtype && !o.allow_dtype_conversion) {
        return InvalidArgumentError("tensor '" + seg.key + "': requested dtype " +
                                    std::string(DTypeName(lt.dtype)) + " but the HF model holds " +
                                    std::string(DTypeName(rec.dtype)) +
                                    " (allow_dtype_conversion converts)");
      }
      if (rec.shape != seg.global_shape &&
          !(o.allow_shape_mismatch && rec.shape.size() == seg.global_shape.size())) {
        return InvalidArgumentError("tensor '" + seg.key + "': requested global shape " +
                                    ShapeToString(seg.global_shape) + " but the HF model holds " +
                                    ShapeToString(rec.shape));
      }
    }
  }
  if (!state.objects.empty() && !o.allow_missing_keys) {
    missing->push_back(state.objects[0].key + " (objects are not in HF models)");
  }
  std::sort(missing->begin(), missing->end());
  missing->erase(std::unique(missing->begin(), missing->end()), missing->end());
  return OkStatus();
}

Result<LoadResult> LoadFromHfCollective(State& state, const std::string& hf_dir,
                                        const HfMapping& mapping, Comm& comm,
                                        const HfLoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  Storage* storage = options.storage ? options.storage : DefaultStorage();

  // 1. Headers, read once and broadcast.
  std::string blob;
  Status s;
  if (comm.rank() == 0) {
    Result<std::string> r =
        Guarded("HF load: reading headers", [&] { return ReadHfHeaders(storage, hf_dir); });
    s = r.status();
    if (r.ok()) blob = std::move(*r);
  }
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  SP_RETURN_IF_ERROR(comm.Broadcast(&blob, 0));
  Result<Source> src = Guarded("HF load: mapping", [&]() -> Result<Source> {
    SP_ASSIGN_OR_RETURN(HfDirIndex idx, DecodeHfHeaders(blob, hf_dir));
    return SourceFromHfIndex(std::move(idx), hf_dir, mapping, options.variables);
  });
  blob.clear();
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, src.status()));
  const Manifest& m = src->m;

  // 2. Requests (as Load: one error names missing and unexpected keys).
  LoadResult result;
  std::string wanted;
  s = Guarded("HF load: checking the requests",
              [&] { return CheckRequests(m, state, options, &result.missing_keys, &wanted); });
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  Result<GatheredRequests> gathered = GatherRequests(comm, wanted, result.missing_keys);
  s = gathered.status();
  if (s.ok()) {
    for (size_t i : gathered->unrequested) result.unexpected_keys.push_back(m.tensors[i].key);
    s = RequestsError("HF model '" + hf_dir + "' (mapping '" + mapping.name + "')",
                      gathered->missing, options.allow_missing_keys, result.unexpected_keys,
                      options.allow_unexpected_keys);
  }
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));

  // 3. Reads of this rank's boxes only.
  s = Guarded("HF load: reading", [&]() -> Status {
    SP_ASSIGN_OR_RETURN(std::vector<Region> regions, BuildRegions(state.tensors));
    SP_ASSIGN_OR_RETURN(LoadPlan plan, PlanLoad(m, regions, options.allow_shape_mismatch));
    for (const View& v : plan.zero_fill) {
      const std::vector<char> zero(v.elem_size, 0);
      StridedCopy(
          v, View{const_cast<char*>(zero.data()), v.elem_size, v.shape, Shape(v.shape.size(), 0)});
    }
    ThreadPool pool(std::max(1, options.io_threads));
    DataFiles files(storage, hf_dir, &m);
    ReadStats read;
    ReadOptions ro;
    ro.verify_checksums = false;  // HF files carry no checksums
    ro.gap_bytes = 0;             // every rank reads only its own bytes
    SP_RETURN_IF_ERROR(ExecuteLoadPlan(m, plan, &files, &pool, ro, &read));
    result.bytes_read = read.bytes.load();
    return OkStatus();
  });
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace

// Every local step is Guarded; this catches what a collective call throws.
Result<LoadResult> LoadFromHf(State& state, const std::string& hf_dir, const HfMapping& mapping,
                              Comm& comm, const HfLoadOptions& options) {
  return Guarded("HF load",
                 [&] { return LoadFromHfCollective(state, hf_dir, mapping, comm, options); });
}

Result<std::vector<HfKeyInfo>> DescribeHf(const std::string& hf_dir, const HfMapping& mapping,
                                          const HfOptions& options) {
  Storage* storage = options.storage ? options.storage : DefaultStorage();
  SP_ASSIGN_OR_RETURN(HfDirIndex idx, ScanHfDir(storage, hf_dir));
  SP_ASSIGN_OR_RETURN(Source src,
                      SourceFromHfIndex(std::move(idx), hf_dir, mapping, options.variables));
  std::vector<HfKeyInfo> out;
  for (MappedKey& mk : src.mapped) out.push_back(std::move(mk.info));
  return out;
}

}  // namespace shardpoint
