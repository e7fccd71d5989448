// DefaultStorage (shardpoint/storage.h): "s3://" paths to the object store,
// every other path to POSIX files.
//
// It lives here, in the module above io, because it needs both; io's own
// callers (Resources) reach it through the public declaration. The S3 storage
// is made on the first s3:// path, from the AWS environment and profiles
// (ResolveS3Options); if that fails (no credentials), every s3:// call
// returns that error, and POSIX paths are unaffected.
//
// MakeObjectStoreStorage (shardpoint/object_store.h) is the same dispatch
// with an S3 storage made at once from the caller's options.
#include <mutex>

#include "shardpoint/object_store.h"
#include "shardpoint/storage.h"
#include "src/io/file_map.h"
#include "src/io/overwrite_open.h"
#include "src/objstore/s3_storage.h"

namespace shardpoint {
namespace {

using internal_objstore::S3Storage;

bool IsS3(const std::string& path) { return path.starts_with("s3://"); }

class DispatchStorage : public Storage,
                        public internal_io::PreferredReadSize,
                        public internal_io::WholeFileRead,
                        public internal_io::OverwriteOpener,
                        public internal_io::FileMapper,
                        public internal_io::HeldCompletes,
                        public internal_io::AbandonedWrites {
 public:
  DispatchStorage() = default;
  // With the object store given: no lazy set-up from the environment.
  explicit DispatchStorage(std::unique_ptr<S3Storage> s3) : s3_(std::move(s3)) {
    std::call_once(once_, [] {});
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const WriteFileOptions& options) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return s->NewWritableFile(path, options);
  }
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return s->NewReadableFile(path);
  }
  Result<std::unique_ptr<ReadableFile>> NewDirectReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return s->NewDirectReadableFile(path);
  }
  Status CreateDirs(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return s->CreateDirs(path);
  }
  Status SyncDir(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return s->SyncDir(path);
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (IsS3(from) != IsS3(to)) {
      return InvalidArgumentError("rename " + from + " to " + to + ": across storages");
    }
    SP_ASSIGN_OR_RETURN(Storage * s, For(from));
    return s->Rename(from, to);
  }
  Result<bool> Exchange(const std::string& a, const std::string& b) override {
    if (IsS3(a) || IsS3(b)) return false;
    return PosixFileStorage()->Exchange(a, b);
  }
  Status RemoveFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return s->RemoveFile(path);
  }
  Status RemoveAll(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return s->RemoveAll(path);
  }
  Result<bool> Exists(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return s->Exists(path);
  }
  Result<bool> IsDirectory(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return s->IsDirectory(path);
  }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return s->ListDir(path);
  }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return s->LockFile(path);
  }
  Status UnlockFile(std::unique_ptr<FileLock> lock) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(lock->path()));
    return s->UnlockFile(std::move(lock));
  }
  Status CommitFile(const std::string& path, const std::string& data, bool exclusive) override {
    if (!IsS3(path)) return PosixFileStorage()->CommitFile(path, data, exclusive);
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return s->CommitFile(path, data, exclusive);
  }
  bool SupportsRename(const std::string& path) const override { return !IsS3(path); }
  uint64_t PreferredReadBytes(const std::string& path) override {
    if (!IsS3(path)) return 0;
    Result<Storage*> s = For(path);
    return s.ok() ? internal_io::PreferredReadBytes(*s, path) : 0;
  }
  bool ReadsWholeFiles(const std::string& path) override { return IsS3(path); }
  Result<std::optional<std::string>> ReadWholeFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(Storage * s, For(path));
    return internal_io::ReadFileIfPresent(s, path);
  }
  // s3:// paths only (FindHeldCompletes asks only where SupportsRename is false).
  void HoldCompletes(const std::string& dir) override {
    Result<Storage*> s = For(dir);
    if (s.ok() && IsS3(dir)) static_cast<S3Storage*>(*s)->HoldCompletes(dir);
  }
  Status ReleaseCompletes(const std::string& dir, bool complete) override {
    if (!IsS3(dir)) return OkStatus();
    SP_ASSIGN_OR_RETURN(Storage * s, For(dir));
    return static_cast<S3Storage*>(s)->ReleaseCompletes(dir, complete);
  }
  // s3:// paths only: a POSIX file is visible as written, and removed as a file.
  Result<uint64_t> AbortAbandonedWrites(const std::string& dir, const Which& which) override {
    if (!IsS3(dir)) return uint64_t{0};
    SP_ASSIGN_OR_RETURN(Storage * s, For(dir));
    return static_cast<S3Storage*>(s)->AbortAbandonedWrites(dir, which);
  }
  // POSIX paths only: an object has no bytes to write over.
  Result<std::unique_ptr<WritableFile>> OpenForOverwrite(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(auto* posix, PosixFacet<internal_io::OverwriteOpener>(
                                         path, "open " + path + " to write over it"));
    return posix->OpenForOverwrite(path);
  }

  // POSIX paths only: an object is not memory to map.
  Result<std::unique_ptr<internal_io::MappedFile>> MapFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(auto* posix, PosixFacet<internal_io::FileMapper>(path, "map " + path));
    return posix->MapFile(path);
  }

 private:
  // The POSIX storage's facet T for `path`; FailedPrecondition "<what>: not
  // a POSIX file" for an s3:// path.
  template <class T>
  static Result<T*> PosixFacet(const std::string& path, const std::string& what) {
    auto* posix = dynamic_cast<T*>(PosixFileStorage());
    if (IsS3(path) || posix == nullptr) return FailedPreconditionError(what + ": not a POSIX file");
    return posix;
  }

  Result<Storage*> For(const std::string& path) {
    if (!IsS3(path)) return PosixFileStorage();
    std::call_once(once_, [this] {
      Result<internal_objstore::S3Options> o = internal_objstore::ResolveS3Options({});
      if (!o.ok()) {
        s3_error_ = o.status();
        return;
      }
      Result<std::unique_ptr<internal_objstore::S3Client>> c =
          internal_objstore::S3Client::Make(*o);
      if (!c.ok()) {
        s3_error_ = c.status();
        return;
      }
      s3_ = std::make_unique<S3Storage>(std::move(*c));
    });
    if (s3_ == nullptr) return s3_error_.WithContext(path);
    return s3_.get();
  }

  std::once_flag once_;
  std::unique_ptr<S3Storage> s3_;
  Status s3_error_;
};

Result<internal_objstore::S3Addressing> ParseAddressing(const std::string& s) {
  if (s.empty() || s == "auto") return internal_objstore::S3Addressing::kAuto;
  if (s == "path") return internal_objstore::S3Addressing::kPath;
  if (s == "virtual") return internal_objstore::S3Addressing::kVirtualHosted;
  return InvalidArgumentError("object store addressing '" + s +
                              "': expected 'path', 'virtual' or 'auto'");
}

}  // namespace

Result<std::unique_ptr<Storage>> MakeObjectStoreStorage(const ObjectStoreOptions& options) {
  internal_objstore::S3Options o;
  o.endpoint = options.endpoint;
  o.region = options.region;
  SP_ASSIGN_OR_RETURN(o.addressing, ParseAddressing(options.addressing));
  o.profile = options.profile;
  o.access_key_id = options.access_key_id;
  o.secret_access_key = options.secret_access_key;
  o.session_token = options.session_token;
  o.ca_bundle = options.ca_bundle;
  // 0 keeps the default; anything else, negative too, is ResolveS3Options' to check.
  if (options.part_size != 0) o.part_size = options.part_size;
  if (options.parts_in_flight != 0) o.parts_in_flight = options.parts_in_flight;
  if (options.max_connections != 0) o.max_connections = options.max_connections;
  SP_ASSIGN_OR_RETURN(o, internal_objstore::ResolveS3Options(std::move(o)));
  SP_ASSIGN_OR_RETURN(std::unique_ptr<internal_objstore::S3Client> client,
                      internal_objstore::S3Client::Make(o));
  return std::unique_ptr<Storage>(
      new DispatchStorage(std::make_unique<S3Storage>(std::move(client))));
}

Storage* DefaultStorage() {
  // Never destroyed: file objects and other static destructors may use it.
  static Storage* const storage = new DispatchStorage;
  return storage;
}

}  // namespace shardpoint
