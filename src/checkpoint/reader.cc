#include "src/checkpoint/reader.h"

#include <mutex>
#include <sstream>

#include "src/checkpoint/commit.h"
#include "src/format/checksum.h"
#include "src/geometry/convert.h"
#include "src/geometry/view_range.h"

namespace shardpoint::internal {

struct DataFiles::Impl {
  Storage* storage;
  std::string dir;
  const Manifest* m;
  std::mutex mu;
  std::vector<std::unique_ptr<ReadableFile>> open;
};

DataFiles::DataFiles(Storage* storage, std::string dir, const Manifest* m)
    : impl_(new Impl{storage, std::move(dir), m, {}, {}}) {
  impl_->open.resize(m->files.size());
}
DataFiles::~DataFiles() = default;

Result<const ReadableFile*> DataFiles::Get(uint32_t file) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (file >= impl_->open.size()) return InternalError("file index out of range");
  if (!impl_->open[file]) {
    Result<std::unique_ptr<ReadableFile>> f =
        impl_->storage->NewReadableFile(JoinPath(impl_->dir, impl_->m->files[file]));
    if (!f.ok()) return f.status();
    impl_->open[file] = std::move(*f);
  }
  return impl_->open[file].get();
}

namespace {

std::string Range(uint64_t offset, uint64_t n) {
  return "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) + ")";
}

std::string ChunkName(const Manifest& m, const ReadPiece& p) {
  const TensorRecord& t = m.tensors[p.tensor];
  return "tensor '" + t.key + "' chunk " + std::to_string(p.chunk) + " " +
         t.chunks[p.chunk].box.ToString() + " in '" + m.files[t.chunks[p.chunk].file] + "'";
}

Status ChecksumMismatch(const std::string& what, uint64_t offset, uint64_t n, uint64_t want,
                        uint64_t got) {
  std::ostringstream os;
  os << what << ": checksum mismatch at " << Range(offset, n) << " (stored " << std::hex << want
     << ", computed " << got << ")";
  return DataLossError(os.str());
}

// Places `count` stored elements (contiguous at src, in the stored dtype) at
// flat range [begin, begin+count) of the piece's destination.
void Place(const ReadPiece& p, const char* src, int64_t begin, int64_t count,
           std::vector<char>* scratch) {
  if (p.src_dtype != p.dst_dtype) {
    scratch->resize(count * DTypeSize(p.dst_dtype));
    ConvertElements(p.src_dtype, src, p.dst_dtype, scratch->data(), count);
    src = scratch->data();
  }
  ScatterFlatRange(p.dst, begin, begin + count, src);
}

Status ReadPieceBytes(const Manifest& m, const ReadPiece& p, DataFiles* files,
                      const ReadOptions& options) {
  const ChunkRecord& c = m.tensors[p.tensor].chunks[p.chunk];
  SP_ASSIGN_OR_RETURN(const ReadableFile* file, files->Get(c.file));
  const size_t es = DTypeSize(p.src_dtype);
  const bool direct = p.src_dtype == p.dst_dtype && p.dst.IsContiguous();
  thread_local std::vector<char> staging, scratch;

  if (p.whole_chunk && (direct || options.verify_checksums)) {
    // The whole chunk, in slices of at most staging_bytes: each slice lands
    // in place (or in staging, then placed) and is hashed while it is still
    // in cache. Memory stays bounded whatever the chunk size.
    ChecksumState sum;
    const int64_t total = p.in_chunk.num_elements();
    const int64_t max_elems = std::max<int64_t>(1, options.staging_bytes / es);
    for (int64_t done = 0; done < total;) {
      const int64_t n = std::min(max_elems, total - done);
      const size_t nbytes = static_cast<size_t>(n) * es;
      char* dst = p.dst.data + done * es;
      if (!direct) {
        staging.resize(nbytes);
        dst = staging.data();
      }
      Status s = file->ReadAt(c.offset + static_cast<uint64_t>(done) * es, nbytes, dst);
      if (!s.ok()) return s.WithContext(ChunkName(m, p));
      if (options.verify_checksums) sum.Update(dst, nbytes);
      if (!direct) Place(p, dst, done, n, &scratch);
      done += n;
    }
    if (options.verify_checksums && sum.Digest() != c.checksum) {
      return ChecksumMismatch(ChunkName(m, p), c.offset, c.nbytes, c.checksum, sum.Digest());
    }
    return OkStatus();
  }
  // Partial (or unverified) read: each run, nothing else, in bounded pieces.
  const RunPattern runs = RunsOf(c.box.shape, p.in_chunk);
  const int64_t max_elems = std::max<int64_t>(1, options.staging_bytes / es);
  for (int64_t i = 0; i < runs.runs; ++i) {
    const int64_t first = RunStart(c.box.shape, p.in_chunk, runs, i);
    for (int64_t done = 0; done < runs.run_elements;) {
      const int64_t n = std::min(max_elems, runs.run_elements - done);
      const uint64_t at = c.offset + static_cast<uint64_t>(first + done) * es;
      const int64_t flat = i * runs.run_elements + done;
      const size_t nbytes = static_cast<size_t>(n) * es;
      if (direct) {
        // A contiguous destination: the run lands in place.
        Status s = file->ReadAt(at, nbytes, p.dst.data + flat * es);
        if (!s.ok()) return s.WithContext(ChunkName(m, p));
      } else {
        staging.resize(nbytes);
        Status s = file->ReadAt(at, nbytes, staging.data());
        if (!s.ok()) return s.WithContext(ChunkName(m, p));
        Place(p, staging.data(), flat, n, &scratch);
      }
      done += n;
    }
  }
  return OkStatus();
}

}  // namespace

Status ExecuteLoadPlan(const Manifest& m, const LoadPlan& plan, DataFiles* files, ThreadPool* pool,
                       const ReadOptions& options, std::atomic<uint64_t>* bytes_read) {
  return ParallelFor(pool, static_cast<int64_t>(plan.pieces.size()), [&](int64_t i) {
    const ReadPiece& p = plan.pieces[i];
    SP_RETURN_IF_ERROR(ReadPieceBytes(m, p, files, options));
    const ChunkRecord& c = m.tensors[p.tensor].chunks[p.chunk];
    bytes_read->fetch_add(p.whole_chunk ? c.nbytes : p.nbytes);
    return OkStatus();
  });
}

Status ReadVerified(DataFiles* files, const Manifest& m, uint32_t file, uint64_t offset,
                    uint64_t nbytes, uint64_t checksum, const std::string& what, char* dst) {
  SP_ASSIGN_OR_RETURN(const ReadableFile* f, files->Get(file));
  Status s = f->ReadAt(offset, nbytes, dst);
  if (!s.ok()) return s.WithContext(what);
  uint64_t got = Checksum64(dst, nbytes);
  if (got != checksum) {
    return ChecksumMismatch(what + " in '" + m.files[file] + "'", offset, nbytes, checksum, got);
  }
  return OkStatus();
}

Status CheckStored(DataFiles* files, const Manifest& m, uint32_t file, uint64_t offset,
                   uint64_t nbytes, uint64_t checksum, const std::string& what, size_t slice_bytes,
                   const std::function<void(uint64_t)>& on_slice) {
  SP_ASSIGN_OR_RETURN(const ReadableFile* f, files->Get(file));
  const uint64_t slice = std::max<uint64_t>(1, std::min<uint64_t>(nbytes, slice_bytes));
  std::unique_ptr<char[]> buf(new char[slice]);
  ChecksumState sum;
  for (uint64_t done = 0; done < nbytes;) {
    const uint64_t n = std::min(slice, nbytes - done);
    Status s = f->ReadAt(offset + done, n, buf.get());
    if (!s.ok()) return s.WithContext(what);
    sum.Update(buf.get(), n);
    done += n;
    if (on_slice) on_slice(n);
  }
  if (sum.Digest() != checksum) {
    return ChecksumMismatch(what + " in '" + m.files[file] + "'", offset, nbytes, checksum,
                            sum.Digest());
  }
  return OkStatus();
}

}  // namespace shardpoint::internal
