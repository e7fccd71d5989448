// An object written as a stream of bytes: parts of S3Options::part_size are
// uploaded in parallel (a multipart upload) while the next are staged, at
// most parts_in_flight of them at once, so an upload holds at most
// (parts_in_flight + 1) * part_size bytes in memory whatever its size. An
// object that ends within its first part is one PUT instead (no multipart
// round trips). Nothing is visible under the key until Finish succeeds; an
// upload destroyed unfinished is aborted (its parts freed on the server).
//
// Part buffers are recycled: a part's worker thread (which also computes
// its Content-MD5, so parts are hashed in parallel) hands its buffer back
// when the part is sent, and the next part is staged in it; at most
// parts_in_flight + 2 buffers are kept. So a large object costs a few
// allocations, not one fresh part_size buffer (and its page faults) per part.
// One thread at a time, except TakeBuffer/GiveBuffer.
#pragma once

#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shardpoint/status.h"
#include "src/objstore/s3_client.h"

namespace shardpoint::internal_objstore {

class S3Upload {
 public:
  // `client` must outlive the upload.
  S3Upload(S3Client* client, std::string bucket, std::string key);
  ~S3Upload();
  S3Upload(const S3Upload&) = delete;
  S3Upload& operator=(const S3Upload&) = delete;

  // Appends n bytes. Returns the first error of any part so far.
  Status Append(const void* data, size_t n);
  // Sends what is staged and makes the object visible. if_none_match: a
  // conditional create (FailedPrecondition if the key exists; single-PUT
  // objects only, which is what commit objects are).
  Status Finish(bool if_none_match = false);
  // Abandons the upload (its parts are deleted on the server).
  Status Abort();

  uint64_t size() const { return size_; }
  int parts() const { return static_cast<int>(etags_.size()); }
  // Buffers allocated so far (tests: recycling keeps this small).
  int buffers_allocated() const;

  // A buffer of part_size bytes, recycled if one is free; thread-safe. The
  // writable file also stages out-of-order writes in them.
  std::unique_ptr<char[]> TakeBuffer();
  void GiveBuffer(std::unique_ptr<char[]> buffer);
  size_t part_size() const { return part_size_; }

 private:
  Status StartPart();
  Status WaitOldest();

  S3Client* const client_;
  const std::string bucket_;
  const std::string key_;
  const size_t part_size_;
  std::unique_ptr<char[]> staged_;  // part_size_ bytes, staged_size_ of them used
  size_t staged_size_ = 0;
  std::string upload_id_;  // empty until the first full part
  std::vector<std::string> etags_;
  std::vector<std::future<Result<std::string>>> in_flight_;  // in part order
  size_t first_in_flight_ = 0;
  Status error_;
  uint64_t size_ = 0;
  bool done_ = false;
  mutable std::mutex free_mu_;
  std::vector<std::unique_ptr<char[]>> free_;
  int allocated_ = 0;
};

}  // namespace shardpoint::internal_objstore
