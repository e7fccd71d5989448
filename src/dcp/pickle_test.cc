// The restricted pickle reader: what it builds from valid input, and one test
// per malformed or refused input (typed error, never a crash).
#include "src/dcp/pickle.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "src/dcp/pickle_ops.h"

namespace shardpoint::internal_dcp {
namespace {

bool AllowCollections(std::string_view module, std::string_view name) {
  return module == "collections" && name == "OrderedDict";
}

// The bytes of a literal, embedded NULs included.
template <size_t N>
std::string P(const char (&s)[N]) {
  return std::string(s, N - 1);
}

namespace op = pickle_op;

// Assembles a pickle opcode by opcode: PROTO 4, one FRAME, the body, STOP.
class Assembler {
 public:
  Assembler& Op(uint8_t code) { return Le(code, 1); }
  Assembler& Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) body_.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  Assembler& Raw(std::string_view s) {
    body_.append(s);
    return *this;
  }
  Assembler& Str(std::string_view s) { return Op(op::kShortBinUnicode).Le(s.size(), 1).Raw(s); }
  Assembler& Int1(uint8_t v) { return Op(op::kBinInt1).Le(v, 1); }
  std::string Finish() const {
    std::string out;
    out.push_back(static_cast<char>(op::kProto));
    out.push_back(4);
    out.push_back(static_cast<char>(op::kFrame));
    const uint64_t n = body_.size() + 1;  // the frame holds the body and STOP
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
    return out + body_ + static_cast<char>(op::kStop);
  }

 private:
  std::string body_;
};

Result<PickleTree> Parse(const std::string& bytes) {
  return ParsePickle(bytes, AllowCollections, "test.pkl");
}

void ExpectError(const std::string& bytes, StatusCode code, const std::string& text) {
  Result<PickleTree> t = Parse(bytes);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), code) << t.status().ToString();
  EXPECT_NE(t.status().ToString().find(text), std::string::npos) << t.status().ToString();
  EXPECT_NE(t.status().ToString().find("test.pkl"), std::string::npos);
}

TEST(DcpPickleTest, BuildsDictOfListTupleIntsAndStrings) {
  // {'a': [1, -1, 300, (7, 'x')], 'b': None} in protocol 4 with memo.
  const std::string p =
      P("\x80\x04}\x94(\x8c\x01"
        "a\x94]\x94(K\x01\x8a\x01\xff"
        "M\x2c\x01"
        "K\x07\x8c\x01x\x86"
        "e\x8c\x01"
        "bNu.");
  Result<PickleTree> t = Parse(p);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const PyValue& root = t->at(t->root);
  ASSERT_EQ(root.kind, PyKind::kDict);
  const uint32_t a = DictGet(*t, t->root, "a");
  ASSERT_NE(a, kNoValue);
  const PyValue& list = t->at(a);
  ASSERT_EQ(list.kind, PyKind::kList);
  ASSERT_EQ(list.items.size(), 4u);
  EXPECT_EQ(t->at(list.items[0]).i, 1);
  EXPECT_EQ(t->at(list.items[1]).i, -1);
  EXPECT_EQ(t->at(list.items[2]).i, 300);
  EXPECT_EQ(t->at(list.items[3]).kind, PyKind::kTuple);
  EXPECT_EQ(t->at(t->at(list.items[3]).items[1]).text, "x");
  EXPECT_EQ(t->at(DictGet(*t, t->root, "b")).kind, PyKind::kNone);
}

TEST(DcpPickleTest, RecordsCallsWithoutMakingThem) {
  // collections.OrderedDict() with one item set on it.
  const std::string p =
      P("\x80\x02"
        "ccollections\nOrderedDict\nq\x00)R\x8c\x01kK\x05s.");
  Result<PickleTree> t = Parse(p);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const PyValue& root = t->at(t->root);
  ASSERT_EQ(root.kind, PyKind::kCall);
  EXPECT_EQ(t->at(root.callable).text, "collections.OrderedDict");
  EXPECT_EQ(t->at(DictGet(*t, t->root, "k")).i, 5);
}

TEST(DcpPickleTest, SelfReferenceIsNotACrash) {
  // l = []; l.append(l)
  Result<PickleTree> t =
      Parse(P("\x80\x04]\x94h\x00"
              "a."));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->at(t->root).items[0], t->root);
}

TEST(DcpPickleTest, ForbiddenGlobalIsRefusedByName) {
  ExpectError(P("\x80\x02"
                "cos\nsystem\n"
                "X\x02\x00\x00\x00lsR."),
              StatusCode::kFailedPrecondition, "'os.system'");
}

TEST(DcpPickleTest, ForbiddenStackGlobalIsRefusedByName) {
  ExpectError(P("\x80\x04\x8c\x08"
                "builtins\x8c\x04"
                "eval\x93."),
              StatusCode::kFailedPrecondition, "'builtins.eval'");
}

TEST(DcpPickleTest, UnknownOpcodeIsRefused) {
  ExpectError(P("\x80\x02I1\n."), StatusCode::kFailedPrecondition, "opcode 0x49");
}

TEST(DcpPickleTest, UnsupportedProtocol) {
  ExpectError(P("\x80\x06N."), StatusCode::kDataLoss, "protocol 6");
}

TEST(DcpPickleTest, TruncatedString) {
  ExpectError(P("\x80\x02X\x64\x00\x00\x00"
                "abc"),
              StatusCode::kDataLoss, "truncated");
}

TEST(DcpPickleTest, HugeStringLengthIsTruncationNotAllocation) {
  ExpectError(P("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f"
                "ab"),
              StatusCode::kDataLoss, "truncated");
}

TEST(DcpPickleTest, MissingStop) {
  ExpectError(P("\x80\x02K\x01"), StatusCode::kDataLoss, "without STOP");
}

TEST(DcpPickleTest, StackUnderflow) {
  ExpectError(P("\x80\x02"
                "a."),
              StatusCode::kDataLoss, "underflow");
}

TEST(DcpPickleTest, PopBelowMark) {
  ExpectError(P("\x80\x02K\x01(0."), StatusCode::kDataLoss, "underflow");
}

TEST(DcpPickleTest, MemoGetOfUnstoredIndex) {
  ExpectError(P("\x80\x02h\x05."), StatusCode::kDataLoss, "memo 5");
}

TEST(DcpPickleTest, BuildOnNonObject) {
  ExpectError(P("\x80\x02K\x01}b."), StatusCode::kDataLoss, "BUILD");
}

TEST(DcpPickleTest, BuildTwice) {
  ExpectError(P("\x80\x02"
                "ccollections\nOrderedDict\n)R}b}b."),
              StatusCode::kDataLoss, "twice");
}

TEST(DcpPickleTest, CallOfNonClass) {
  ExpectError(P("\x80\x02K\x01)R."), StatusCode::kDataLoss, "not a class");
}

TEST(DcpPickleTest, CallWithNonTupleArguments) {
  ExpectError(P("\x80\x02"
                "ccollections\nOrderedDict\nK\x01R."),
              StatusCode::kDataLoss, "not a tuple");
}

TEST(DcpPickleTest, IntegerWiderThan64Bits) {
  ExpectError(P("\x80\x02\x8a\x09\x01\x02\x03\x04\x05\x06\x07\x08\x09."), StatusCode::kDataLoss,
              "at most 8");
}

TEST(DcpPickleTest, SetItemOnNonDict) {
  ExpectError(P("\x80\x02]K\x01K\x02s."), StatusCode::kDataLoss, "non-dict");
}

TEST(DcpPickleTest, OddSetItems) {
  ExpectError(P("\x80\x02}(K\x01u."), StatusCode::kDataLoss, "odd");
}

TEST(DcpPickleTest, StopWithSeveralValues) {
  ExpectError(P("\x80\x02K\x01K\x02."), StatusCode::kDataLoss, "stack of 2");
}

TEST(DcpPickleTest, GlobalWithoutNewline) {
  ExpectError(P("\x80\x02"
                "ccollections"),
              StatusCode::kDataLoss, "newline");
}

TEST(DcpPickleTest, StackGlobalOfNonStrings) {
  ExpectError(P("\x80\x04K\x01K\x02\x93."), StatusCode::kDataLoss, "not strings");
}

// One pickle that uses every opcode pickle_ops.h names (Python's pickle.loads
// reads the same bytes as {'none': None, 't': True, ...}).
std::string EveryOpcode() {
  Assembler a;
  a.Op(op::kEmptyDict).Op(op::kMemoize).Op(op::kMark);
  a.Str("none").Op(op::kNone).Str("t").Op(op::kNewTrue).Str("f").Op(op::kNewFalse);
  a.Str("i32").Op(op::kBinInt).Le(static_cast<uint32_t>(-5), 4).Str("u8").Int1(200);
  a.Str("u16").Op(op::kBinInt2).Le(1000, 2).Str("long").Op(op::kLong1).Le(5, 1).Le(1ull << 38, 5);
  a.Str("float").Op(op::kBinFloat).Raw(std::string("\x3f\xf8\0\0\0\0\0\0", 8));
  a.Str("s4").Op(op::kBinUnicode).Le(3, 4).Raw("abc").Str("s8").Op(op::kBinUnicode8).Le(2, 8);
  a.Raw("de").Str("b1").Op(op::kShortBinBytes).Le(1, 1).Raw("x").Str("b4").Op(op::kBinBytes);
  a.Le(2, 4).Raw("yz").Str("b8").Op(op::kBinBytes8).Le(1, 8).Raw("w");
  a.Str("tup").Op(op::kMark).Int1(1).Int1(2).Op(op::kTuple).Str("t0").Op(op::kEmptyTuple);
  a.Str("t1").Int1(1).Op(op::kTuple1).Str("t2").Int1(1).Int1(2).Op(op::kTuple2);
  a.Str("t3").Int1(1).Int1(2).Int1(3).Op(op::kTuple3);
  a.Str("list").Op(op::kEmptyList).Op(op::kBinPut).Le(1, 1).Op(op::kMark).Int1(1).Int1(2);
  a.Op(op::kAppends).Int1(3).Op(op::kAppend).Str("l2").Op(op::kMark).Int1(4).Op(op::kList);
  a.Str("d").Op(op::kMark).Str("k").Int1(1).Op(op::kDict).Str("j").Int1(2).Op(op::kSetItem);
  a.Str("again").Op(op::kBinGet).Le(1, 1).Str("far").Int1(6).Op(op::kLongBinPut).Le(300, 4);
  a.Op(op::kPop).Op(op::kLongBinGet).Le(300, 4).Str("popmark").Op(op::kMark).Int1(1);
  a.Op(op::kPopMark).Int1(8).Str("dup").Int1(5).Op(op::kDup).Op(op::kTuple2);
  a.Str("od").Op(op::kGlobal).Raw("collections\nOrderedDict\n").Op(op::kEmptyTuple);
  a.Op(op::kReduce).Str("obj").Str("collections").Str("OrderedDict").Op(op::kStackGlobal);
  a.Op(op::kEmptyTuple).Op(op::kNewObj).Op(op::kEmptyDict).Op(op::kBuild);
  a.Str("pid").Str("storage").Op(op::kBinPersId).Op(op::kSetItems);
  return a.Finish();
}

TEST(DcpPickleTest, ReadsEveryNamedOpcode) {
  Result<PickleTree> t = Parse(EveryOpcode());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const PickleTree& tree = *t;
  auto at = [&](std::string_view key) -> const PyValue& {
    const uint32_t v = DictGet(tree, tree.root, key);
    EXPECT_NE(v, kNoValue) << key;
    return tree.at(v == kNoValue ? tree.root : v);
  };
  auto ints = [&](const PyValue& seq) {
    std::vector<int64_t> out;
    for (uint32_t v : seq.items) out.push_back(tree.at(v).i);
    return out;
  };
  EXPECT_EQ(tree.at(tree.root).items.size(), 2u * 28);
  EXPECT_EQ(at("none").kind, PyKind::kNone);
  EXPECT_EQ(at("t").kind, PyKind::kBool);
  EXPECT_EQ(at("t").i, 1);
  EXPECT_EQ(at("f").i, 0);
  EXPECT_EQ(at("i32").i, -5);
  EXPECT_EQ(at("u8").i, 200);
  EXPECT_EQ(at("u16").i, 1000);
  EXPECT_EQ(at("long").i, int64_t{1} << 38);
  EXPECT_EQ(at("float").f, 1.5);
  EXPECT_EQ(at("s4").text, "abc");
  EXPECT_EQ(at("s8").text, "de");
  for (const char* k : {"b1", "b4", "b8"}) EXPECT_EQ(at(k).kind, PyKind::kBytes) << k;
  EXPECT_EQ(at("b1").text + at("b4").text + at("b8").text, "xyzw");
  EXPECT_EQ(ints(at("tup")), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(at("t0").kind, PyKind::kTuple);
  EXPECT_TRUE(at("t0").items.empty());
  EXPECT_EQ(ints(at("t1")), (std::vector<int64_t>{1}));
  EXPECT_EQ(ints(at("t2")), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ints(at("t3")), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(at("list").kind, PyKind::kList);
  EXPECT_EQ(ints(at("list")), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(&at("again"), &at("list"));  // BINGET returns the stored list itself
  EXPECT_EQ(ints(at("l2")), (std::vector<int64_t>{4}));
  EXPECT_EQ(at("d").kind, PyKind::kDict);
  EXPECT_EQ(tree.at(DictGet(tree, DictGet(tree, tree.root, "d"), "k")).i, 1);
  EXPECT_EQ(tree.at(DictGet(tree, DictGet(tree, tree.root, "d"), "j")).i, 2);
  EXPECT_EQ(at("far").i, 6);
  EXPECT_EQ(at("popmark").i, 8);
  EXPECT_EQ(ints(at("dup")), (std::vector<int64_t>{5, 5}));
  for (const char* k : {"od", "obj"}) {
    ASSERT_EQ(at(k).kind, PyKind::kCall) << k;
    EXPECT_EQ(tree.at(at(k).callable).text, "collections.OrderedDict") << k;
  }
  EXPECT_EQ(at("od").state, kNoValue);
  ASSERT_NE(at("obj").state, kNoValue);
  EXPECT_EQ(tree.at(at("obj").state).kind, PyKind::kDict);
  ASSERT_EQ(at("pid").kind, PyKind::kPersId);
  EXPECT_EQ(tree.at(at("pid").args).text, "storage");
}

// Exactly the opcodes of pickle_ops.h are read: every other byte is refused,
// naming the byte and its offset.
TEST(DcpPickleTest, EveryOtherOpcodeIsRefused) {
  const std::set<uint8_t> named = {op::kProto,
                                   op::kFrame,
                                   op::kStop,
                                   op::kMark,
                                   op::kPop,
                                   op::kPopMark,
                                   op::kDup,
                                   op::kNone,
                                   op::kNewTrue,
                                   op::kNewFalse,
                                   op::kBinInt,
                                   op::kBinInt1,
                                   op::kBinInt2,
                                   op::kLong1,
                                   op::kBinFloat,
                                   op::kBinUnicode,
                                   op::kShortBinUnicode,
                                   op::kBinUnicode8,
                                   op::kBinBytes,
                                   op::kShortBinBytes,
                                   op::kBinBytes8,
                                   op::kEmptyTuple,
                                   op::kTuple,
                                   op::kTuple1,
                                   op::kTuple2,
                                   op::kTuple3,
                                   op::kEmptyList,
                                   op::kList,
                                   op::kAppend,
                                   op::kAppends,
                                   op::kEmptyDict,
                                   op::kDict,
                                   op::kSetItem,
                                   op::kSetItems,
                                   op::kBinPut,
                                   op::kLongBinPut,
                                   op::kMemoize,
                                   op::kBinGet,
                                   op::kLongBinGet,
                                   op::kGlobal,
                                   op::kStackGlobal,
                                   op::kReduce,
                                   op::kNewObj,
                                   op::kBuild,
                                   op::kBinPersId};
  ASSERT_EQ(named.size(), 45u);  // no two names share a byte
  for (int byte = 0; byte < 256; ++byte) {
    const std::string p = std::string("\x80\x02", 2) + static_cast<char>(byte);
    Result<PickleTree> t = Parse(p);
    ASSERT_FALSE(t.ok()) << byte;  // nothing here ends with a valid STOP
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02x", byte);
    const bool refused = t.status().code() == StatusCode::kFailedPrecondition &&
                         t.status().ToString().find(std::string("opcode ") + hex + " at byte 2") !=
                             std::string::npos;
    EXPECT_EQ(refused, named.count(static_cast<uint8_t>(byte)) == 0)
        << hex << ": " << t.status().ToString();
  }
}

}  // namespace
}  // namespace shardpoint::internal_dcp
