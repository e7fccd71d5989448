// The object-store save's directory check, overlapped with its uploads.
//
// On a storage that can hold completes (an object store: no rename; the
// interface is src/io/held_completes.h) the save does not LIST its directory
// before writing. Instead:
//   1. rank 0 starts PrepareDirectory (the LIST; a crashed save's data/ is
//      removed there) in the background, and every rank holds its completes;
//   2. the ranks create their uploads and send every part, completing none;
//   3. after step 4's gather, rank 0 takes the listing's verdict: a refusal
//      (a checkpoint is there) wins over any rank's error, with the text it
//      always had ("rank 0: a checkpoint already exists at ...");
//   4. every rank learns whether to complete: on any error it aborts its
//      uploads (nothing is left: no object, no multipart upload); else it
//      completes them (data/ was emptied before: the removal finished with
//      the listing), and the completes are agreed before the manifest PUT.
// Critical path: create, parts, completes, manifest: 4 round trips, the
// LIST beside the first two. POSIX saves are unchanged (not active()).
#pragma once

#include <future>
#include <string>

#include "shardpoint/comm.h"
#include "shardpoint/storage.h"
#include "src/io/held_completes.h"

namespace shardpoint::internal_checkpoint {

class HeldSave {
 public:
  HeldSave(Storage* storage, const std::string& dir, bool overwrite, int rank);
  // Aborts what is still held (a save that left early).
  ~HeldSave();
  HeldSave(const HeldSave&) = delete;
  HeldSave& operator=(const HeldSave&) = delete;

  bool active() const { return held_ != nullptr; }
  // Step 1 (instead of agreeing on the directory first).
  void Start();
  // Steps 3-4, after the gather; `gathered` is rank 0's agreed status so far
  // (other ranks': the exchange's). Rank 0's becomes the verdict or the
  // completes' error; `write_dir_out` (rank 0's, for a failed save's cleanup)
  // is set once the listing accepted the directory. Returns a failure of the
  // exchange itself.
  Status Settle(Comm& comm, Status* gathered, std::string* write_dir_out);

 private:
  internal_io::HeldCompletes* const held_;
  Storage* const storage_;
  const std::string dir_;
  const bool overwrite_;
  const int rank_;
  bool holding_ = false;
  std::future<Status> prepared_;  // rank 0: the listing's verdict
};

}  // namespace shardpoint::internal_checkpoint
