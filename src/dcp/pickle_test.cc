// The restricted pickle reader: what it builds from valid input, and one test
// per malformed or refused input (typed error, never a crash).
#include "src/dcp/pickle.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace shardpoint::internal_dcp
