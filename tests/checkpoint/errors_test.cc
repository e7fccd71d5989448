// Every way a save or load can go wrong gets a typed error that names what is
// at fault, and nothing committed is damaged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "shardpoint/checkpoint.h"
#include "shardpoint/layout.h"
#include "src/io/fault_storage.h"
#include "src/io/mem_storage.h"

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

// N ranks as threads; rank r's state is make(r). Returns every rank's status.
std::vector<Status> SaveRanks(int n, const std::function<State(int)>& make, Storage* storage,
                              const std::string& dir, SaveOptions options = {}) {
  std::vector<State> states;
  for (int r = 0; r < n; ++r) states.push_back(make(r));
  options.storage = storage;
  return RunThreadRanks(
      n, [&](Comm& comm) { return Save(states[comm.rank()], dir, comm, options).status(); });
}

Result<LoadResult> LoadOne(State& state, Storage* storage, const std::string& dir,
                           LoadOptions options = {}) {
  options.storage = storage;
  std::unique_ptr<Comm> comm = MakeSingleComm();
  return Load(state, dir, *comm, options);
}

// Every rank failed, each with the same error.
Status Same(const std::vector<Status>& all) {
  for (const Status& s : all) {
    EXPECT_EQ(s.ToString(), all[0].ToString());
  }
  return all[0];
}

// Rows [begin, begin+rows) of a [4, 4] F32 tensor "w".
State Rows(std::vector<float>* mem, int64_t begin, int64_t rows, DType dtype = DType::kF32,
           Shape shape = {4, 4}) {
  mem->assign(rows * shape[1], 1.5f);
  LocalTensor lt;
  lt.dtype = dtype;
  lt.data = mem->data();
  lt.shape = {rows, shape[1]};
  lt.segments = {Segment{"w", shape, Box({begin, 0}, {rows, shape[1]}), {0, 0}}};
  State s;
  s.tensors.push_back(lt);
  return s;
}

class ErrorsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Storage> mem_ = NewMemStorage();
  std::vector<float> a_, b_;
};

TEST_F(ErrorsTest, DtypeDisagreementNamesKeyAndRanks) {
  Status s = Same(SaveRanks(
      2, [&](int r) { return r == 0 ? Rows(&a_, 0, 2) : Rows(&b_, 2, 2, DType::kI32); }, mem_.get(),
      "/c"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("tensor 'w': rank 0 has F32 [4, 4] but rank 1 has I32 [4, 4]"));
}

TEST_F(ErrorsTest, ShapeDisagreementNamesKeyAndRanks) {
  Status s = Same(SaveRanks(
      2,
      [&](int r) {
        return r == 0 ? Rows(&a_, 0, 2) : Rows(&b_, 2, 2, DType::kF32, {5, 4});
      },
      mem_.get(), "/c"));
  EXPECT_THAT(s.message(), HasSubstr("rank 0 has F32 [4, 4] but rank 1 has F32 [5, 4]"));
}

TEST_F(ErrorsTest, PartialOverlapNamesBothBoxesAndRanks) {
  Status s = Same(SaveRanks(
      2, [&](int r) { return r == 0 ? Rows(&a_, 0, 3) : Rows(&b_, 2, 2); }, mem_.get(), "/c"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': box [0:3, 0:4] (rank 0) partially overlaps "
                                     "box [2:4, 0:4] (rank 1)"));
}

TEST_F(ErrorsTest, GapNamesMissingElement) {
  Status s = Same(SaveRanks(
      2, [&](int r) { return r == 0 ? Rows(&a_, 0, 1) : Rows(&b_, 2, 2); }, mem_.get(), "/c"));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w' of shape [4, 4] is not fully covered: its boxes "
                                     "hold 12 of 16 elements; element [1, 0] is missing"));
}

TEST_F(ErrorsTest, BoxOutsideTensorIsRejectedBeforeAnyIo) {
  Status s = Same(SaveRanks(
      1, [&](int) { return Rows(&a_, 3, 2); }, mem_.get(), "/c"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("rank 0: tensor #0"));
  EXPECT_THAT(s.message(), HasSubstr("'w'"));
  EXPECT_FALSE(*mem_->Exists("/c/manifest"));
}

TEST_F(ErrorsTest, ReplicasOfOneBoxAreStoredOnce) {
  ASSERT_TRUE(Same(SaveRanks(
                       3, [&](int) { return Rows(&a_, 0, 4); }, mem_.get(), "/c"))
                  .ok());
  State st = Rows(&b_, 0, 4);
  b_.assign(16, 0);
  Result<LoadResult> r = LoadOne(st, mem_.get(), "/c");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes_read, 64u);
  EXPECT_EQ(b_, std::vector<float>(16, 1.5f));
}

TEST_F(ErrorsTest, ObjectGridDisagreement) {
  Status s = Same(SaveRanks(
      2,
      [&](int r) {
        State st;
        st.objects.push_back(Object{"rng", "x", {0}, {r + 1}});
        return st;
      },
      mem_.get(), "/c"));
  EXPECT_THAT(s.message(), HasSubstr("object 'rng' index [0]: rank 0 has grid [1]"));
}

class LoadErrorsTest : public ErrorsTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Same(SaveRanks(
                         2,
                         [&](int r) {
                           State st = r == 0 ? Rows(&a_, 0, 2) : Rows(&b_, 2, 2);
                           st.objects.push_back(Object{"setting", "fast", {}, {}});
                           st.common = "iteration=7";
                           return st;
                         },
                         mem_.get(), "/c"))
                    .ok());
  }
  std::vector<float> out_;
};

TEST_F(LoadErrorsTest, MissingKeyIsNotFoundAndNamed) {
  State st = Rows(&out_, 0, 4);
  st.tensors[0].segments[0].key = "v";
  Result<LoadResult> r = LoadOne(st, mem_.get(), "/c");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("lacks requested keys 'v'"));
}

TEST_F(LoadErrorsTest, UnexpectedKeyIsNamed) {
  State st;  // requests nothing of "w"
  st.objects.push_back(Object{"setting", "", {}, {}});
  Result<LoadResult> r = LoadOne(st, mem_.get(), "/c");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("holds keys no rank requested: 'w'"));
}

// One strict load names both kinds of keys: no second round trip.
TEST_F(LoadErrorsTest, MissingAndUnexpectedKeysAreNamedInOneError) {
  std::vector<Status> all = RunThreadRanks(2, [&](Comm& comm) {
    State st;
    st.objects.push_back(Object{"setting", "", {}, {}});
    if (comm.rank() == 1) st.objects.push_back(Object{"absent", "", {}, {}});
    LoadOptions o;
    o.storage = mem_.get();
    return Load(st, "/c", comm, o).status();
  });
  Status s = Same(all);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("checkpoint '/c' lacks requested keys 'absent' "
                                     "(allow_missing_keys skips them); it also holds keys no "
                                     "rank requested: 'w' (allow_unexpected_keys ignores them)"));
}

TEST_F(LoadErrorsTest, PartialLoadReturnsMissingAndUnexpectedKeys) {
  State st;
  st.objects.push_back(Object{"setting", "", {}, {}});
  st.objects.push_back(Object{"absent", "", {}, {}});
  st.common = "";
  LoadOptions o;
  o.allow_missing_keys = o.allow_unexpected_keys = true;
  Result<LoadResult> r = LoadOne(st, mem_.get(), "/c", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->missing_keys, std::vector<std::string>{"absent"});
  EXPECT_EQ(r->unexpected_keys, std::vector<std::string>{"w"});
  EXPECT_EQ(st.objects[0].bytes, "fast");  // restored on a rank that did not write it
  EXPECT_EQ(*st.common, "iteration=7");
}

// The C++ API takes metadata as text; what it stores must decode as JSON in
// every reader (Python's json included), so Save checks it on rank 0 and
// every rank gets the error.
TEST_F(ErrorsTest, MetadataThatIsNotJsonIsRefusedOnEveryRank) {
  std::vector<float> a(8), b(8);
  const std::string bad[] = {"{\"run\": ", "\"\xff\xfe\"", "not json", "{} {}",
                             std::string(200, '[') + std::string(200, ']')};
  const std::string why[] = {"metadata_json is not valid JSON", "metadata_json is not valid JSON",
                             "metadata_json is not valid JSON", "metadata_json is not valid JSON",
                             "metadata_json nests deeper than 128 levels"};
  for (size_t i = 0; i < std::size(bad); ++i) {
    SCOPED_TRACE(bad[i].substr(0, 20));
    std::vector<Status> all = SaveRanks(
        2,
        [&](int r) {
          State st = r == 0 ? Rows(&a, 0, 2) : Rows(&b, 2, 2);
          if (r == 0) st.metadata_json = bad[i];
          return st;
        },
        mem_.get(), "/md" + std::to_string(i));
    Status s = Same(all);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("rank 0: " + why[i]));
    EXPECT_FALSE(*mem_->Exists("/md" + std::to_string(i) + "/manifest"));
  }
  std::vector<Status> ok = SaveRanks(
      2,
      [&](int r) {
        State st = r == 0 ? Rows(&a, 0, 2) : Rows(&b, 2, 2);
        st.metadata_json = R"({"run": "x", "deep": [[[1]]], "s": "\u00e9"})";
        return st;
      },
      mem_.get(), "/md_ok");
  EXPECT_TRUE(Same(ok).ok()) << ok[0].ToString();
}

TEST_F(ErrorsTest, AbsentCommonIsMissingUnlessOptional) {
  std::vector<float> a(8), b(8), out(16);
  ASSERT_TRUE(Same(SaveRanks(
                       2, [&](int r) { return r == 0 ? Rows(&a, 0, 2) : Rows(&b, 2, 2); },
                       mem_.get(), "/nocommon"))
                  .ok());
  State st = Rows(&out, 0, 4);
  st.common = "placeholder";
  Result<LoadResult> r = LoadOne(st, mem_.get(), "/nocommon");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("lacks requested keys '<common>'"));
  LoadOptions o;
  o.common_optional = true;
  r = LoadOne(st, mem_.get(), "/nocommon", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->missing_keys.empty());
  EXPECT_FALSE(st.common.has_value());
}

TEST_F(LoadErrorsTest, DtypeMismatchRaisesUnlessConverting) {
  std::vector<uint16_t> bf16(16);
  LocalTensor lt = WholeTensor("w", DType::kBF16, bf16.data(), {4, 4});
  State st;
  st.tensors.push_back(lt);
  Result<LoadResult> r = LoadOne(st, mem_.get(), "/c");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("tensor 'w': requested dtype BF16 but the checkpoint holds F32"));
  LoadOptions o;
  o.allow_dtype_conversion = true;
  o.allow_unexpected_keys = true;
  r = LoadOne(st, mem_.get(), "/c", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(bf16, std::vector<uint16_t>(16, 0x3fc0));  // 1.5 in bf16
}

TEST_F(LoadErrorsTest, ShapeMismatchRaises) {
  State st = Rows(&out_, 0, 4, DType::kF32, {8, 4});
  Result<LoadResult> r = LoadOne(st, mem_.get(), "/c");
  EXPECT_THAT(
      r.status().message(),
      HasSubstr("tensor 'w': requested global shape [8, 4] but the checkpoint holds [4, 4]"));
}

TEST_F(LoadErrorsTest, MissingManifestIsNotFound) {
  State st = Rows(&out_, 0, 4);
  Result<LoadResult> r = LoadOne(st, mem_.get(), "/nowhere");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("no checkpoint at '/nowhere'"));
}

TEST_F(LoadErrorsTest, GarbageManifestIsDataLoss) {
  ASSERT_TRUE(mem_->WriteStringToFile("/c/manifest", "not a manifest at all").ok());
  State st = Rows(&out_, 0, 4);
  Result<LoadResult> r = LoadOne(st, mem_.get(), "/c");
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("/c/manifest"));
}

TEST_F(LoadErrorsTest, FlippedByteIsChecksumErrorNamingKeyAndFile) {
  Result<std::string> f = mem_->ReadFileToString("/c/data/1.safetensors");
  ASSERT_TRUE(f.ok());
  std::string bytes = *f;
  bytes[bytes.size() - 5] ^= 0x01;
  ASSERT_TRUE(mem_->WriteStringToFile("/c/data/1.safetensors", bytes).ok());
  State st = Rows(&out_, 0, 4);
  Result<LoadResult> r = LoadOne(st, mem_.get(), "/c", [] {
    LoadOptions o;
    o.allow_unexpected_keys = true;
    return o;
  }());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(
      r.status().message(),
      HasSubstr("tensor 'w' chunk 1 [2:4, 0:4] in 'data/1.safetensors': checksum mismatch"));
}

// A chunk read in many slices (read_slice_bytes far below its size), straight
// into place and through dtype conversion: bit for bit, and a flipped byte in
// its last slice is still caught.
TEST_F(LoadErrorsTest, ChunksReadInSlicesAreExactAndVerified) {
  std::vector<float> big(64 * 250);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.25f - 7.0f;
  State saved;
  saved.tensors.push_back(WholeTensor("big", DType::kF32, big.data(), {64, 250}));
  ASSERT_TRUE(Same(SaveRanks(
                       1, [&](int) { return saved; }, mem_.get(), "/s"))
                  .ok());
  LoadOptions o;
  o.read_slice_bytes = 1000;  // 250 elements: 64 slices
  std::vector<float> f32(big.size());
  State st;
  st.tensors.push_back(WholeTensor("big", DType::kF32, f32.data(), {64, 250}));
  ASSERT_TRUE(LoadOne(st, mem_.get(), "/s", o).ok());
  EXPECT_EQ(f32, big);
  std::vector<double> f64(big.size());
  State conv;
  conv.tensors.push_back(WholeTensor("big", DType::kF64, f64.data(), {64, 250}));
  o.allow_dtype_conversion = true;
  ASSERT_TRUE(LoadOne(conv, mem_.get(), "/s", o).ok());
  for (size_t i = 0; i < big.size(); ++i) ASSERT_EQ(f64[i], static_cast<double>(big[i])) << i;

  Result<std::string> f = mem_->ReadFileToString("/s/data/0.safetensors");
  ASSERT_TRUE(f.ok());
  std::string bytes = *f;
  bytes[bytes.size() - 3] ^= 0x10;
  ASSERT_TRUE(mem_->WriteStringToFile("/s/data/0.safetensors", bytes).ok());
  Result<LoadResult> r = LoadOne(st, mem_.get(), "/s", o);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(
      r.status().message(),
      HasSubstr("tensor 'big' chunk 0 [0:64, 0:250] in 'data/0.safetensors': checksum mismatch"));
}

TEST_F(LoadErrorsTest, TruncatedDataFileIsDataLossNamingRange) {
  Result<std::string> f = mem_->ReadFileToString("/c/data/1.safetensors");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(mem_->WriteStringToFile("/c/data/1.safetensors", f->substr(0, f->size() - 10)).ok());
  State st = Rows(&out_, 0, 4);
  LoadOptions o;
  o.allow_unexpected_keys = true;
  Result<LoadResult> r = LoadOne(st, mem_.get(), "/c", o);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("tensor 'w' chunk 1"));
  EXPECT_THAT(r.status().message(), HasSubstr("data/1.safetensors"));
}

TEST_F(ErrorsTest, ExistingCheckpointIsNotOverwrittenByDefault) {
  ASSERT_TRUE(Same(SaveRanks(
                       1, [&](int) { return Rows(&a_, 0, 4); }, mem_.get(), "/c"))
                  .ok());
  Status s = Same(SaveRanks(
      1, [&](int) { return Rows(&a_, 0, 4); }, mem_.get(), "/c"));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("a checkpoint already exists at '/c'"));
}

TEST_F(ErrorsTest, FailedWriteOnOneRankFailsAllAndLeavesNoManifest) {
  internal_io::FaultStorage faults(mem_.get());
  faults.FailWritesFrom(2);
  std::vector<std::vector<float>> mem(4);
  std::vector<Status> all = SaveRanks(
      4, [&](int r) { return Rows(&mem[r], r, 1); }, &faults, "/c");
  for (const Status& s : all) {
    EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("injected"));
  }
  EXPECT_FALSE(*mem_->Exists("/c/manifest"));
}

TEST_F(ErrorsTest, FullDiskAtReserveFailsEveryRankBeforeWriting) {
  internal_io::FaultStorage faults(mem_.get());
  faults.FailReserves(true);
  std::vector<std::vector<float>> mem(2);
  std::vector<Status> all = SaveRanks(
      2, [&](int r) { return Rows(&mem[r], 2 * r, 2); }, &faults, "/c");
  for (const Status& s : all) {
    EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("No space left on device (injected)"));
    EXPECT_THAT(s.message(), HasSubstr(".safetensors"));
  }
  EXPECT_EQ(faults.writes(), 0);
  EXPECT_FALSE(*mem_->Exists("/c/manifest"));
}

TEST_F(ErrorsTest, FailedOverwriteKeepsThePreviousCheckpoint) {
  ASSERT_TRUE(Same(SaveRanks(
                       1, [&](int) { return Rows(&a_, 0, 4); }, mem_.get(), "/c"))
                  .ok());
  internal_io::FaultStorage faults(mem_.get());
  faults.FailWritesFrom(1);
  SaveOptions o;
  o.overwrite = true;
  std::vector<float> other;
  Status s = Same(SaveRanks(
      1,
      [&](int) {
        State st = Rows(&other, 0, 4);
        other.assign(16, 9.0f);
        return st;
      },
      &faults, "/c", o));
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  State st = Rows(&b_, 0, 4);
  b_.assign(16, 0);
  ASSERT_TRUE(LoadOne(st, mem_.get(), "/c").ok());
  EXPECT_EQ(b_, std::vector<float>(16, 1.5f));
}

TEST_F(ErrorsTest, OverwriteReplacesTheCheckpoint) {
  ASSERT_TRUE(Same(SaveRanks(
                       1, [&](int) { return Rows(&a_, 0, 4); }, mem_.get(), "/c"))
                  .ok());
  SaveOptions o;
  o.overwrite = true;
  std::vector<float> other;
  ASSERT_TRUE(Same(SaveRanks(
                       1,
                       [&](int) {
                         State st = Rows(&other, 0, 4);
                         other.assign(16, 9.0f);
                         return st;
                       },
                       mem_.get(), "/c", o))
                  .ok());
  State st = Rows(&b_, 0, 4);
  ASSERT_TRUE(LoadOne(st, mem_.get(), "/c").ok());
  EXPECT_EQ(b_, std::vector<float>(16, 9.0f));
  EXPECT_FALSE(*mem_->Exists("/c.partial"));
  EXPECT_FALSE(*mem_->Exists("/c.old"));
}

// Refuses to remove an existing *.old or *.partial directory, as NFS or FUSE
// does while some process holds a file of it open.
class HeldOpenStorage : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Status RemoveAll(const std::string& path) override {
    const bool previous = path.ends_with(".old") || path.ends_with(".partial");
    Result<bool> exists = Exists(path);
    if (previous && exists.ok() && *exists) {
      return IOError("remove tree: " + path + " is held open (injected)");
    }
    return StorageWrapper::RemoveAll(path);
  }
};

// The commit point has passed when the previous checkpoint is removed: its
// removal failing leaves the new checkpoint committed, the save OK, and the
// failure in SaveStats::cleanup_error and the log line. The next overwrite
// moves the leftover aside while it is held, and removes it once it is not.
TEST_F(ErrorsTest, OverwriteWhosePreviousCheckpointCannotBeRemovedStillCommits) {
  ASSERT_TRUE(Same(SaveRanks(
                       2, [&](int r) { return Rows(r ? &b_ : &a_, 2 * r, 2); }, mem_.get(), "/c"))
                  .ok());
  HeldOpenStorage held(mem_.get());
  std::vector<std::string> lines;
  SaveOptions o;
  o.overwrite = true;
  o.storage = &held;
  o.log = [&](const std::string& line) { lines.push_back(line); };
  std::vector<std::vector<float>> other(2);
  std::vector<State> states;
  for (int r = 0; r < 2; ++r) {
    states.push_back(Rows(&other[r], 2 * r, 2));
    other[r].assign(8, 9.0f);
  }
  std::vector<SaveStats> stats(2);
  std::vector<Status> st = RunThreadRanks(2, [&](Comm& comm) {
    Result<SaveStats> s = Save(states[comm.rank()], "/c", comm, o);
    if (s.ok()) stats[comm.rank()] = *s;
    return s.status();
  });
  ASSERT_TRUE(Same(st).ok()) << st[0].ToString();
  const std::string previous = *mem_->Exists("/c.partial") ? "/c.partial" : "/c.old";
  EXPECT_THAT(stats[0].cleanup_error, HasSubstr("'" + previous + "'"));
  EXPECT_THAT(stats[0].cleanup_error, HasSubstr("held open (injected)"));
  EXPECT_EQ(stats[1].cleanup_error, "");                // rank 0 removes it
  EXPECT_FALSE(*mem_->Exists(previous + "/manifest"));  // never looks complete
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("(committed)"));
  EXPECT_THAT(lines[0], HasSubstr("; but removing the previous checkpoint, moved to '" + previous));
  State loaded = Rows(&b_, 0, 4);
  b_.assign(16, 0);
  ASSERT_TRUE(LoadOne(loaded, mem_.get(), "/c").ok());
  EXPECT_EQ(b_, std::vector<float>(16, 9.0f));
  // Still held: the next overwrite moves the leftover aside and goes on.
  for (int r = 0; r < 2; ++r) other[r].assign(8, 7.0f);
  st = RunThreadRanks(
      2, [&](Comm& comm) { return Save(states[comm.rank()], "/c", comm, o).status(); });
  ASSERT_TRUE(Same(st).ok()) << st[0].ToString();
  EXPECT_TRUE(*mem_->Exists("/c.stale.1"));
  EXPECT_FALSE(*mem_->Exists("/c.stale.1/manifest"));
  ASSERT_TRUE(LoadOne(loaded, mem_.get(), "/c").ok());
  EXPECT_EQ(b_, std::vector<float>(16, 7.0f));
  // Released: the next overwrite clears every leftover.
  o.storage = mem_.get();
  st = RunThreadRanks(2, [&](Comm& comm) {
    Result<SaveStats> s = Save(states[comm.rank()], "/c", comm, o);
    if (s.ok()) {
      EXPECT_EQ(s->cleanup_error, "");
    }
    return s.status();
  });
  ASSERT_TRUE(Same(st).ok()) << st[0].ToString();
  EXPECT_FALSE(*mem_->Exists("/c.partial"));
  EXPECT_FALSE(*mem_->Exists("/c.old"));
  EXPECT_FALSE(*mem_->Exists("/c.stale.1"));
}

// Two ranks declare the same whole box of "w" but hold different data (two TP
// ranks that both claim to be the primary replica of their own shard).
TEST_F(ErrorsTest, VerifyReplicasRejectsReplicasThatDiffer) {
  std::vector<std::vector<float>> mem(3);
  auto make = [&](int r) {
    State st = Rows(&mem[r], 0, 4);
    if (r == 2) mem[r][5] = -7.0f;  // one element differs on rank 2
    return st;
  };
  SaveOptions o;  // verify_replicas is on by default
  Status s = Same(SaveRanks(3, make, mem_.get(), "/c", o));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  // The key's owner gives the box to its holder at (XXH3-64("w") + chunk 0)
  // mod 3 = 1 (src/plan/dist_plan.h), which rank 2's bytes are compared with.
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w' box [0:4, 0:4]: rank 2 holds different data than "
                                     "the rank that wrote it to 'data/1.safetensors'"));
  EXPECT_FALSE(*mem_->Exists("/c/manifest"));
  // Identical replicas pass, and without the check the first holder's bytes win.
  EXPECT_TRUE(Same(SaveRanks(
                       3, [&](int r) { return Rows(&mem[r], 0, 4); }, mem_.get(), "/c", o))
                  .ok());
}

TEST_F(ErrorsTest, VerifyReplicasRejectsObjectReplicasThatDiffer) {
  SaveOptions o;
  o.verify_replicas = true;
  Status s = Same(SaveRanks(
      2,
      [&](int r) {
        State st;
        st.objects.push_back(Object{"setting", r == 0 ? "adam" : "sgd!", {}, {}});
        return st;
      },
      mem_.get(), "/c", o));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("object 'setting' index []: rank 1 holds different bytes"));
}

TEST_F(ErrorsTest, FailedSwapOfAnOverwriteKeepsThePreviousCheckpoint) {
  ASSERT_TRUE(Same(SaveRanks(
                       1, [&](int) { return Rows(&a_, 0, 4); }, mem_.get(), "/c"))
                  .ok());
  internal_io::FaultStorage faults(mem_.get());
  faults.FailRenameTo("/c");  // the exchange of /c and /c.partial
  SaveOptions o;
  o.overwrite = true;
  std::vector<float> other;
  Status s = Same(SaveRanks(
      1,
      [&](int) {
        State st = Rows(&other, 0, 4);
        other.assign(16, 9.0f);
        return st;
      },
      &faults, "/c", o));
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  static_cast<internal_io::MemStorage*>(mem_.get())->SimulateCrash();
  State st = Rows(&b_, 0, 4);
  ASSERT_TRUE(LoadOne(st, mem_.get(), "/c").ok());
  EXPECT_EQ(b_, std::vector<float>(16, 1.5f));
}

TEST_F(ErrorsTest, CommittedOverwriteSurvivesACrash) {
  ASSERT_TRUE(Same(SaveRanks(
                       1, [&](int) { return Rows(&a_, 0, 4); }, mem_.get(), "/c"))
                  .ok());
  SaveOptions o;
  o.overwrite = true;
  std::vector<float> other;
  ASSERT_TRUE(Same(SaveRanks(
                       1,
                       [&](int) {
                         State st = Rows(&other, 0, 4);
                         other.assign(16, 9.0f);
                         return st;
                       },
                       mem_.get(), "/c", o))
                  .ok());
  static_cast<internal_io::MemStorage*>(mem_.get())->SimulateCrash();
  State st = Rows(&b_, 0, 4);
  ASSERT_TRUE(LoadOne(st, mem_.get(), "/c").ok());
  EXPECT_EQ(b_, std::vector<float>(16, 9.0f));
}

TEST_F(ErrorsTest, CrashBeforeCommitLeavesNoCheckpoint) {
  auto* mem = static_cast<internal_io::MemStorage*>(mem_.get());
  internal_io::FaultStorage faults(mem_.get());
  faults.FailRenameTo("/manifest");
  Status s = Same(SaveRanks(
      1, [&](int) { return Rows(&a_, 0, 4); }, &faults, "/c"));
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  mem->SimulateCrash();
  State st = Rows(&b_, 0, 4);
  EXPECT_EQ(LoadOne(st, mem_.get(), "/c").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardpoint
