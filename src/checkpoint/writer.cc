#include "src/checkpoint/writer.h"

#include <cstring>
#include <future>
#include <tuple>
#include <utility>

#include "src/format/checksum.h"
#include "src/geometry/view_range.h"
#include "src/io/aligned_buffer.h"
#include "src/io/raw_buffer.h"
#include "src/io/staging_memory.h"

using shardpoint::internal_format::ChecksumState;
using shardpoint::internal_geometry::GatherFlatRange;
using shardpoint::internal_geometry::View;
using shardpoint::internal_io::kDirectIoAlignment;
using shardpoint::internal_io::RawBuffer;
using shardpoint::internal_io::Shelve;
using shardpoint::internal_io::TakeShelved;
using shardpoint::internal_plan::RankFile;
using shardpoint::internal_plan::WriteItem;

namespace shardpoint::internal_checkpoint {
namespace {

uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// A staging buffer of at least `cap` bytes, 4096-aligned for O_DIRECT: from
// the process-wide shelf where one is there (touched before: it faults
// nothing), else fresh. At least 2 MiB, so that RawBuffer backs it with a
// transparent huge page (one first-touch fault per 2 MiB, not 512: each a
// trap to the host in a VM; 2 MiB-aligned). Measured on this project's VM:
// a save of 4 ranks went from 0.59 to 1.29 GB/s (docs/performance.md,
// Tuning: staging_bytes).
RawBuffer StagingBuffer(size_t cap) {
  RawBuffer b = TakeShelved();
  b.Resize(std::max(cap, internal_io::kHugePageSize));
  return b;
}

struct ShelveOnExit {
  std::vector<RawBuffer>* bufs;
  ~ShelveOnExit() {
    for (RawBuffer& b : *bufs) Shelve(std::move(b));
  }
};

// A buffered file is written from the source itself where an item is
// contiguous and has at least this many bytes left (the kernel copies into the
// page cache anyway); smaller pieces are gathered, so that they share writes.
// 64 KiB: a write call costs about what copying 4 KiB does, while a gathered
// piece costs a second copy (and, on a tmpfs local tier, fresh staging pages).
constexpr size_t kMinInPlace = size_t{64} << 10;

// A buffered file's staging buffers hold only what is gathered (small or
// strided pieces), so they are capped: fewer fresh pages to fault in per
// file, and buffers small enough to stay in cache for the kernel's copy.
constexpr size_t kMaxBufferedStaging = size_t{1} << 20;

// Produces the file's bytes in order into staging buffers.
class Stream {
 public:
  Stream(const RankFile& rf, const std::vector<View>& sources, uint64_t block_size)
      : rf_(rf),
        sources_(sources),
        sums_(rf.items.size()),
        block_size_(block_size),
        blocks_(rf.items.size()) {
    for (const View& v : sources) contiguous_.push_back(v.IsContiguous());
  }

  // Fills up to `cap` bytes at `out`; returns the number written (0 at end).
  // With `in_place`, stops early where Borrow() can take over.
  size_t Fill(char* out, size_t cap, bool in_place = false) {
    size_t n = 0;
    while (n < cap && pos_ < rf_.size) {
      if (in_place && n > 0 && Borrowable()) break;
      if (pos_ < rf_.header.size()) {
        size_t k = std::min(cap - n, rf_.header.size() - pos_);
        std::memcpy(out + n, rf_.header.data() + pos_, k);
        n += k, pos_ += k;
        continue;
      }
      const WriteItem& item = rf_.items[item_];
      const View& src = sources_[item_];
      uint64_t done = pos_ - item.offset;
      size_t k = std::min<uint64_t>(cap - n, item.nbytes - done);
      const size_t es = src.elem_size;
      GatherFlatRange(out + n, src, done / es, (done + k) / es);
      Consume(out + n, k);
      n += k;
    }
    return n;
  }

  // Where the current item is contiguous with at least kMinInPlace bytes
  // left: up to `cap` of them in place (checksummed on the way) and their
  // count; else {nullptr, 0}.
  std::pair<const char*, size_t> Borrow(size_t cap) {
    if (!Borrowable()) return {nullptr, 0};
    const WriteItem& item = rf_.items[item_];
    const uint64_t done = pos_ - item.offset;
    const size_t k = static_cast<size_t>(std::min<uint64_t>(cap, item.nbytes - done));
    const char* p = sources_[item_].data + done;
    Consume(p, k);
    return {p, k};
  }

  std::vector<uint64_t> Digests() const {
    std::vector<uint64_t> out;
    out.reserve(sums_.size());
    for (const ChecksumState& s : sums_) out.push_back(s.Digest());
    return out;
  }

  std::vector<std::vector<uint64_t>> TakeBlockSums() { return std::move(blocks_); }

  void SkipEmptyLeadingItems() {
    while (item_ < rf_.items.size() && rf_.items[item_].nbytes == 0) ++item_;
  }

 private:
  // Bytes [done, done + k) of the current item, at p.
  void UpdateBlocks(const WriteItem& item, uint64_t done, const char* p, size_t k) {
    while (k > 0) {
      const uint64_t block_end = std::min(item.nbytes, (done / block_size_ + 1) * block_size_);
      const size_t take = static_cast<size_t>(std::min<uint64_t>(k, block_end - done));
      block_.Update(p, take);
      p += take, done += take, k -= take;
      if (done == block_end) {
        blocks_[item_].push_back(block_.Digest());
        block_.Reset();
      }
    }
  }

  // The next k bytes of the current item, at p: checksummed, then passed.
  void Consume(const char* p, size_t k) {
    const WriteItem& item = rf_.items[item_];
    sums_[item_].Update(p, k);
    if (block_size_ && !item.is_object) UpdateBlocks(item, pos_ - item.offset, p, k);
    pos_ += k;
    if (pos_ == item.offset + item.nbytes) ++item_;
    while (item_ < rf_.items.size() && rf_.items[item_].nbytes == 0) ++item_;
  }

  bool Borrowable() const {
    if (pos_ < rf_.header.size() || item_ >= rf_.items.size() || !contiguous_[item_]) return false;
    const WriteItem& item = rf_.items[item_];
    return item.offset + item.nbytes - pos_ >= kMinInPlace;
  }

  const RankFile& rf_;
  const std::vector<View>& sources_;
  std::vector<bool> contiguous_;
  std::vector<ChecksumState> sums_;
  const uint64_t block_size_;
  ChecksumState block_;
  std::vector<std::vector<uint64_t>> blocks_;
  uint64_t pos_ = 0;
  size_t item_ = 0;
};

}  // namespace

Result<std::vector<uint64_t>> WriteDataFile(Storage* storage, const std::string& path,
                                            const RankFile& rf, const std::vector<View>& sources,
                                            ThreadPool* pool, const WriterOptions& options,
                                            std::vector<std::vector<uint64_t>>* block_sums) {
  SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                      storage->NewWritableFile(path, WriteFileOptions{options.direct}));
  const size_t align = std::max<size_t>(file->alignment(), 1);
  if (options.reserve) SP_RETURN_IF_ERROR(file->Reserve(RoundUp(rf.size, align)));
  // O_DIRECT needs aligned memory, so everything goes through the buffers; a
  // buffered file takes contiguous items from the source directly.
  const bool in_place = align == 1;
  size_t cap =
      RoundUp(std::max<size_t>(options.staging_bytes, kDirectIoAlignment), kDirectIoAlignment);
  if (in_place) cap = std::min(cap, kMaxBufferedStaging);
  const int nbuf = std::max(1, options.buffers);
  std::vector<RawBuffer> bufs;
  for (int i = 0; i < nbuf; ++i) bufs.push_back(StagingBuffer(cap));
  ShelveOnExit shelve{&bufs};  // back on the shelf once every write below is waited for
  std::vector<std::future<Status>> inflight(nbuf);

  Stream stream(rf, sources, options.block_size);
  stream.SkipEmptyLeadingItems();
  Status status;
  uint64_t offset = 0;
  for (int b = 0; status.ok(); b = (b + 1) % nbuf) {
    if (inflight[b].valid()) status = inflight[b].get();  // slot b is free again
    if (!status.ok()) break;
    const char* data = nullptr;
    size_t n = 0;
    if (in_place) std::tie(data, n) = stream.Borrow(cap);
    if (n == 0) {
      n = stream.Fill(bufs[b].data(), cap, in_place);
      if (n == 0) break;
      // O_DIRECT needs whole blocks: the last one is zero-padded and the file
      // truncated to its real size afterwards.
      std::memset(bufs[b].data() + n, 0, RoundUp(n, align) - n);
      data = bufs[b].data();
    }
    const size_t len = RoundUp(n, align);
    WritableFile* f = file.get();
    uint64_t at = offset;
    auto task = [f, data, at, len]() { return f->WriteAt(at, data, len); };
    inflight[b] = pool ? pool->Submit(task) : std::async(std::launch::deferred, task);
    offset += n;
  }
  for (auto& f : inflight) {
    if (!f.valid()) continue;
    Status s = f.get();
    if (status.ok()) status = s;
  }
  if (status.ok() && RoundUp(offset, align) != offset) status = file->Truncate(rf.size);
  if (status.ok()) status = file->Sync();
  Status closed = file->Close();
  if (status.ok()) status = closed;
  if (!status.ok()) return status;
  if (block_sums) *block_sums = stream.TakeBlockSums();
  return stream.Digests();
}

}  // namespace shardpoint::internal_checkpoint
