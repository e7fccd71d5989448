#include "src/convert/stream.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>

#include "src/convert/read_box.h"
#include "src/dcp/zip.h"
#include "src/format/checksum.h"
#include "src/io/thread_pool.h"

using shardpoint::internal_checkpoint::DataFiles;
using shardpoint::internal_dcp::Crc32;
using shardpoint::internal_dcp::Crc32Combine;
using shardpoint::internal_format::Checksum64;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_io::ParallelFor;
using shardpoint::internal_source::Source;

namespace shardpoint::internal_convert {
namespace {

struct Unit {
  size_t tensor;
  int64_t begin, end;  // elements of the output tensor
};

}  // namespace

bool IsFloatDType(DType d) {
  switch (d) {
    case DType::kF16:
    case DType::kBF16:
    case DType::kF32:
    case DType::kF64:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

Status StreamTensors(const Source& src, Storage* storage, const std::vector<WritableFile*>& files,
                     const std::vector<OutTensor>& tensors, const StreamOptions& options,
                     std::vector<uint64_t>* checksums) {
  std::vector<Unit> units;
  uint64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const OutTensor& t = tensors[i];
    const int64_t es = static_cast<int64_t>(DTypeSize(t.dtype));
    const int64_t block =
        options.checksums ? std::max<int64_t>(t.numel, 1)
                          : std::max<int64_t>(1, static_cast<int64_t>(options.block_bytes) / es);
    for (int64_t b = 0; b < t.numel; b += block)
      units.push_back({i, b, std::min(t.numel, b + block)});
    total += static_cast<uint64_t>(t.numel * es);
  }
  // Largest units first: the tail of the run is then short ones.
  std::stable_sort(units.begin(), units.end(), [&](const Unit& a, const Unit& b) {
    return (a.end - a.begin) * DTypeSize(tensors[a.tensor].dtype) >
           (b.end - b.begin) * DTypeSize(tensors[b.tensor].dtype);
  });
  if (checksums) checksums->assign(tensors.size(), Checksum64(nullptr, 0));
  std::vector<uint32_t> unit_crcs(options.crc32s ? units.size() : 0);

  DataFiles data(storage, src.dir, &src.index, &src.views);
  std::mutex mu;
  uint64_t done = 0;
  Status status =
      ParallelFor(options.pool, static_cast<int64_t>(units.size()), [&](int64_t u) -> Status {
        const Unit& unit = units[u];
        const OutTensor& t = tensors[unit.tensor];
        const size_t es = DTypeSize(t.dtype);
        const size_t nbytes = static_cast<size_t>(unit.end - unit.begin) * es;
        std::unique_ptr<char[]> buf(new char[nbytes]);
        for (const OutPiece& p : t.pieces) {
          const int64_t lo = std::max(unit.begin, p.out_offset);
          const int64_t hi = std::min(unit.end, p.out_offset + p.box.num_elements());
          if (lo >= hi) continue;
          Status s = ReadBoxRange(src, &data, p.key, p.box, lo - p.out_offset, hi - p.out_offset,
                                  t.dtype, buf.get() + (lo - unit.begin) * es);
          if (!s.ok()) return s.WithContext("writing '" + t.name + "'");
        }
        if (checksums) (*checksums)[unit.tensor] = Checksum64(buf.get(), nbytes);
        if (options.crc32s) unit_crcs[u] = Crc32(0, buf.get(), nbytes);
        SP_RETURN_IF_ERROR(files[t.file]->WriteAt(t.offset + unit.begin * es, buf.get(), nbytes));
        buf.reset();
        if (options.progress) {
          std::lock_guard<std::mutex> lock(mu);
          done += nbytes;
          options.progress(done, total);
        }
        return OkStatus();
      });
  if (!status.ok() || !options.crc32s) return status;
  // Each tensor's units, in order of their elements, combined.
  std::vector<size_t> order(units.size());
  for (size_t u = 0; u < units.size(); ++u) order[u] = u;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair{units[a].tensor, units[a].begin} < std::pair{units[b].tensor, units[b].begin};
  });
  options.crc32s->assign(tensors.size(), 0);
  for (size_t u : order) {
    const uint64_t n = static_cast<uint64_t>(units[u].end - units[u].begin) *
                       DTypeSize(tensors[units[u].tensor].dtype);
    uint32_t& crc = (*options.crc32s)[units[u].tensor];
    crc = Crc32Combine(crc, unit_crcs[u], n);
  }
  return OkStatus();
}

ThreadPool* StreamPool(CallResources& res) { return res.pool(std::max(1, res.io_threads() - 1)); }

Result<ExportHfStats> RunConversion(
    const std::string& what, const std::string& from, const std::string& to,
    const ExportHfOptions& options,
    const std::function<Result<ExportHfStats>(CallResources& res)>& body) {
  CallResources res(options, options.threads);
  Result<ExportHfStats> r = body(res);
  const std::string head = "shardpoint: " + what + " '" + from + "' -> '" + to + "'";
  if (!r.ok()) {
    res.Log(head + " FAILED: " + r.status().ToString());
  } else {
    char buf[160];
    std::snprintf(buf, sizeof buf, ": %d files, %lld tensors, %.3f GB in %.3f s", r->files,
                  static_cast<long long>(r->tensors), r->bytes / 1e9, r->seconds);
    res.Log(head + buf);
  }
  return r;
}

}  // namespace shardpoint::internal_convert
