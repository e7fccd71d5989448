// An object written as bytes at offsets, sent as a multipart upload of
// S3Options::part_size parts in parallel (at most parts_in_flight at once)
// while later parts fill. An object that ends within its first part is one
// PUT instead (no multipart round trips). Nothing is visible under the key
// until Finish succeeds; an upload destroyed unfinished is aborted (its parts
// freed on the server).
//
// Part window: a write is copied straight into the buffer of the part(s) it
// covers, at its offset in them, for the parts in a window of the lowest
// unsent ones (2 parts + 32 MiB of them): writes may come in any order and
// from any number of threads, and they copy in parallel (outside the lock).
// A part is sent as soon as all its bytes are written (parts go out in any
// order: S3 numbers them). A write beyond the window is held in a copy until
// the window reaches it (counted in spilled_bytes(): a save's writes never
// are). Memory: at most (window + parts_in_flight) part buffers per upload.
// Buffers come from a PartPool (s3_part_pool.h), shared by a storage's uploads
// so that the next part, file and save reuse their pages. Each part's
// Content-MD5 is computed by the worker thread that sends it, so parts are
// hashed in parallel.
#pragma once

#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "shardpoint/status.h"
#include "src/objstore/s3_client.h"
#include "src/objstore/s3_part_pool.h"

namespace shardpoint::internal_objstore {

class S3Upload {
 public:
  // `client` (and `pool`, if given) must outlive the upload. Without a pool
  // the upload has its own.
  S3Upload(S3Client* client, std::string bucket, std::string key,
           std::shared_ptr<PartPool> pool = nullptr);
  ~S3Upload();
  S3Upload(const S3Upload&) = delete;
  S3Upload& operator=(const S3Upload&) = delete;

  // Writes n bytes at offset; thread-safe. InvalidArgument naming the byte
  // range if they overlap earlier ones or fall in a part already sent; else
  // the first error of any part so far.
  Status WriteAt(uint64_t offset, const void* data, size_t n);
  // Appends at size() (one writer).
  Status Append(const void* data, size_t n) { return WriteAt(size(), data, n); }
  // The object has at least `size` bytes: those never written are zeros.
  void ExtendTo(uint64_t size);
  // Sends what is left and makes the object visible; no write may be in
  // progress. Bytes never written below ExtendTo's size are zeros; others
  // are an InvalidArgument naming them. if_none_match: a conditional create
  // (FailedPrecondition if the key exists; single-PUT objects only, which is
  // what commit objects are).
  Status Finish(bool if_none_match = false);
  // Finish without its last step: sends every part and waits for them, but
  // does not complete the upload (nothing visible yet; Finish or Abort
  // follows). An object that fits in one part is one PUT: nothing is sent.
  Status SendParts();
  // Abandons the upload (its parts are deleted on the server).
  Status Abort();

  // One past the highest byte written.
  uint64_t size() const;
  int parts() const;
  // Fresh part buffers made by the upload's pool so far (tests).
  int buffers_allocated() const { return pool_->allocated(); }
  // Bytes held in a copy because they came beyond the part window (tests).
  uint64_t spilled_bytes() const;
  size_t part_size() const { return part_size_; }

 private:
  struct Part {
    PartPool::Buffer buffer;
    std::map<uint64_t, uint64_t> ranges;  // [begin, end) in the part, written or being written
    uint64_t done = 0;                    // bytes whose copy has finished
  };
  struct Copy {
    char* dst;
    const char* src;
    size_t n;
    uint64_t part;
  };

  std::string Uri() const;
  bool Sent(uint64_t index) const { return index < base_ || sent_.count(index) > 0; }
  Part& Staged(uint64_t index);
  Status Claim(Part& part, uint64_t index, uint64_t begin, uint64_t end);
  Status Place(uint64_t offset, const char* data, size_t n, std::vector<Copy>* copies);
  Status SendReady();
  Status Send(uint64_t index, size_t n);
  Status WaitOldest();
  Status FillHoles(uint64_t index, Part& part, size_t n);
  Status FinishLocked(bool if_none_match);
  Status SendPartsLocked();

  S3Client* const client_;
  const std::string bucket_;
  const std::string key_;
  const size_t part_size_;
  const uint64_t window_;  // parts staged at once
  const std::shared_ptr<PartPool> pool_;
  mutable std::mutex mu_;
  std::map<uint64_t, Part> staged_;          // by part index, within the window
  std::map<uint64_t, std::string> spilled_;  // by offset: writes beyond the window
  uint64_t spilled_bytes_ = 0;
  uint64_t base_ = 0;               // lowest part index not sent
  std::set<uint64_t> sent_;         // sent parts at or above base_
  uint64_t end_ = 0;                // one past the highest byte written
  uint64_t size_ = 0;               // ExtendTo
  std::string upload_id_;           // empty until the first part is sent
  std::vector<std::string> etags_;  // by part index
  struct InFlight {
    uint64_t index;
    std::future<Result<std::string>> etag;
  };
  std::vector<InFlight> in_flight_;  // in the order sent
  size_t first_in_flight_ = 0;
  Status error_;
  bool done_ = false;
};

}  // namespace shardpoint::internal_objstore
