// The opcodes read here, and nothing else (pickletools names; their bytes are
// named in pickle_ops.h, and each has one handler On<Name> below, found
// through a 256-entry table):
//   framing     PROTO FRAME STOP
//   stack       MARK POP POP_MARK DUP
//   constants   NONE NEWTRUE NEWFALSE BININT BININT1 BININT2 LONG1 BINFLOAT
//               BINUNICODE SHORT_BINUNICODE BINUNICODE8 BINBYTES
//               SHORT_BINBYTES BINBYTES8
//   containers  EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_LIST LIST APPEND
//               APPENDS EMPTY_DICT DICT SETITEM SETITEMS
//   memo        BINPUT LONG_BINPUT MEMOIZE BINGET LONG_BINGET
//   objects     GLOBAL STACK_GLOBAL REDUCE NEWOBJ BUILD BINPERSID
// Anything else (INST, OBJ, EXT*, text literals, sets, buffers, ...) is
// refused: DCP's pickles do not use it.
#include "src/dcp/pickle.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "src/dcp/pickle_ops.h"

namespace shardpoint::internal_dcp {
namespace {

class Parser {
 public:
  Parser(std::string_view in, const GlobalAllowed& allowed, const std::string& what)
      : in_(in), allowed_(allowed), what_(what) {}

  Result<PickleTree> Run() {
    while (true) {
      if (pos_ >= in_.size()) return Bad("ends without STOP");
      const size_t at = pos_;
      const uint8_t op = static_cast<uint8_t>(in_[pos_++]);
      Status s = Step(op, at);
      if (!s.ok()) return s;
      if (stopped_) break;
    }
    if (stack_.size() != 1 || !marks_.empty())
      return Bad("STOP with a stack of " + std::to_string(stack_.size()) + " values");
    tree_.root = stack_[0];
    return std::move(tree_);
  }

 private:
  Status Bad(const std::string& m) const {
    return DataLossError("'" + what_ + "': malformed pickle at byte " + std::to_string(op_at_) +
                         ": " + m);
  }

  Status Take(size_t n, std::string_view* out) {
    if (in_.size() - pos_ < n) return Bad("truncated (needs " + std::to_string(n) + " more bytes)");
    *out = in_.substr(pos_, n);
    pos_ += n;
    return OkStatus();
  }
  template <typename T>
  Status Le(T* v) {
    std::string_view b;
    SP_RETURN_IF_ERROR(Take(sizeof(T), &b));
    std::memcpy(v, b.data(), sizeof(T));  // little-endian hosts only (bytes.cc checks)
    return OkStatus();
  }
  Status Line(std::string_view* out) {
    const size_t nl = in_.find('\n', pos_);
    if (nl == std::string_view::npos) return Bad("GLOBAL without a newline");
    *out = in_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return OkStatus();
  }

  uint32_t New(PyValue v) {
    tree_.values.push_back(std::move(v));
    return static_cast<uint32_t>(tree_.values.size() - 1);
  }
  void Push(uint32_t v) { stack_.push_back(v); }
  Status Pop(uint32_t* v) {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) return Bad("stack underflow");
    *v = stack_.back();
    stack_.pop_back();
    return OkStatus();
  }
  Status Top(uint32_t* v) {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) return Bad("stack underflow");
    *v = stack_.back();
    return OkStatus();
  }
  // The values above the last MARK, which is removed.
  Status PopMark(std::vector<uint32_t>* out) {
    if (marks_.empty()) return Bad("no MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    out->assign(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return OkStatus();
  }
  Status PushSeq(PyKind kind, std::vector<uint32_t> items) {
    PyValue v;
    v.kind = kind;
    v.items = std::move(items);
    Push(New(std::move(v)));
    return OkStatus();
  }
  Status PushStr(PyKind kind, std::string_view s) {
    PyValue v;
    v.kind = kind;
    v.text = std::string(s);
    Push(New(std::move(v)));
    return OkStatus();
  }
  Status PushInt(int64_t i, PyKind kind = PyKind::kInt) {
    PyValue v;
    v.kind = kind;
    v.i = i;
    Push(New(std::move(v)));
    return OkStatus();
  }
  Status Global(std::string_view module, std::string_view name) {
    const std::string full = std::string(module) + "." + std::string(name);
    if (!allowed_(module, name)) {
      return FailedPreconditionError("'" + what_ + "': pickle refers to '" + full +
                                     "', which is not a class a DCP reader loads (nothing was "
                                     "imported or run)");
    }
    return PushStr(PyKind::kGlobal, full);
  }
  Status Put(uint32_t index) {
    uint32_t v = 0;
    SP_RETURN_IF_ERROR(Top(&v));
    memo_[index] = v;
    return OkStatus();
  }
  Status Get(uint32_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return Bad("memo " + std::to_string(index) + " was never stored");
    Push(it->second);
    return OkStatus();
  }
  // Adds key/value pairs to a dict or to an object's items (OrderedDict).
  Status SetItems(const std::vector<uint32_t>& kv) {
    if (kv.size() % 2) return Bad("SETITEMS with an odd number of values");
    uint32_t d = 0;
    SP_RETURN_IF_ERROR(Top(&d));
    PyValue& dv = tree_.values[d];
    if (dv.kind != PyKind::kDict && dv.kind != PyKind::kCall) return Bad("SETITEM on a non-dict");
    dv.items.insert(dv.items.end(), kv.begin(), kv.end());
    return OkStatus();
  }
  Status Append(const std::vector<uint32_t>& vals) {
    uint32_t l = 0;
    SP_RETURN_IF_ERROR(Top(&l));
    PyValue& lv = tree_.values[l];
    if (lv.kind != PyKind::kList) return Bad("APPEND to a non-list");
    lv.items.insert(lv.items.end(), vals.begin(), vals.end());
    return OkStatus();
  }
  // One opcode: the handler its byte names in the table, or a refusal.
  Status Step(uint8_t op, size_t at) {
    op_at_ = at;
    const Handler handler = Handlers()[op];
    if (handler == nullptr) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", op);
      return FailedPreconditionError("'" + what_ + "': pickle opcode " + hex + " at byte " +
                                     std::to_string(at) +
                                     " is not one DCP uses (refused, nothing was run)");
    }
    return (this->*handler)();
  }

  // Each handler reads its opcode's arguments (the opcode byte is read).
  using Handler = Status (Parser::*)();
  static const std::array<Handler, 256>& Handlers() {
    static const std::array<Handler, 256> table = [] {
      namespace op = pickle_op;
      std::array<Handler, 256> h{};
      h[op::kProto] = &Parser::OnProto;
      h[op::kFrame] = &Parser::OnFrame;
      h[op::kStop] = &Parser::OnStop;
      h[op::kMark] = &Parser::OnMark;
      h[op::kPop] = &Parser::OnPop;
      h[op::kPopMark] = &Parser::OnPopMark;
      h[op::kDup] = &Parser::OnDup;
      h[op::kNone] = &Parser::OnNone;
      h[op::kNewTrue] = &Parser::OnBool<true>;
      h[op::kNewFalse] = &Parser::OnBool<false>;
      h[op::kBinInt] = &Parser::OnBinInt<int32_t>;
      h[op::kBinInt1] = &Parser::OnBinInt<uint8_t>;
      h[op::kBinInt2] = &Parser::OnBinInt<uint16_t>;
      h[op::kLong1] = &Parser::OnLong1;
      h[op::kBinFloat] = &Parser::OnBinFloat;
      h[op::kBinUnicode] = &Parser::OnBlob<uint32_t, PyKind::kStr>;
      h[op::kShortBinUnicode] = &Parser::OnBlob<uint8_t, PyKind::kStr>;
      h[op::kBinUnicode8] = &Parser::OnBlob<uint64_t, PyKind::kStr>;
      h[op::kBinBytes] = &Parser::OnBlob<uint32_t, PyKind::kBytes>;
      h[op::kShortBinBytes] = &Parser::OnBlob<uint8_t, PyKind::kBytes>;
      h[op::kBinBytes8] = &Parser::OnBlob<uint64_t, PyKind::kBytes>;
      h[op::kEmptyTuple] = &Parser::OnEmpty<PyKind::kTuple>;
      h[op::kTuple] = &Parser::OnMarked<PyKind::kTuple>;
      h[op::kTuple1] = &Parser::OnTupleN<1>;
      h[op::kTuple2] = &Parser::OnTupleN<2>;
      h[op::kTuple3] = &Parser::OnTupleN<3>;
      h[op::kEmptyList] = &Parser::OnEmpty<PyKind::kList>;
      h[op::kList] = &Parser::OnMarked<PyKind::kList>;
      h[op::kAppend] = &Parser::OnAppend;
      h[op::kAppends] = &Parser::OnAppends;
      h[op::kEmptyDict] = &Parser::OnEmpty<PyKind::kDict>;
      h[op::kDict] = &Parser::OnDict;
      h[op::kSetItem] = &Parser::OnSetItem;
      h[op::kSetItems] = &Parser::OnSetItems;
      h[op::kBinPut] = &Parser::OnPut<uint8_t>;
      h[op::kLongBinPut] = &Parser::OnPut<uint32_t>;
      h[op::kMemoize] = &Parser::OnMemoize;
      h[op::kBinGet] = &Parser::OnGet<uint8_t>;
      h[op::kLongBinGet] = &Parser::OnGet<uint32_t>;
      h[op::kGlobal] = &Parser::OnGlobal;
      h[op::kStackGlobal] = &Parser::OnStackGlobal;
      h[op::kReduce] = &Parser::OnCall;  // callable(*args)
      h[op::kNewObj] = &Parser::OnCall;  // cls.__new__(cls, *args): recorded alike
      h[op::kBuild] = &Parser::OnBuild;
      h[op::kBinPersId] = &Parser::OnBinPersId;
      return h;
    }();
    return table;
  }

  // Framing and the stack.
  Status OnProto() {
    uint8_t p = 0;
    SP_RETURN_IF_ERROR(Le(&p));
    if (p < 2 || p > 5) return Bad("protocol " + std::to_string(p) + " (2 to 5 are read)");
    return OkStatus();
  }
  Status OnFrame() {  // a length hint only
    uint64_t n = 0;
    return Le(&n);
  }
  Status OnStop() {
    stopped_ = true;
    return OkStatus();
  }
  Status OnMark() {
    marks_.push_back(stack_.size());
    return OkStatus();
  }
  Status OnPop() {
    uint32_t a = 0;
    return Pop(&a);
  }
  Status OnPopMark() {
    std::vector<uint32_t> vals;
    return PopMark(&vals);
  }
  Status OnDup() {
    uint32_t a = 0;
    SP_RETURN_IF_ERROR(Top(&a));
    Push(a);
    return OkStatus();
  }

  // Constants.
  Status OnNone() {
    Push(New(PyValue{}));
    return OkStatus();
  }
  template <bool kValue>
  Status OnBool() {
    return PushInt(kValue ? 1 : 0, PyKind::kBool);
  }
  template <typename T>
  Status OnBinInt() {
    T v = 0;
    SP_RETURN_IF_ERROR(Le(&v));
    return PushInt(v);
  }
  Status OnLong1() {  // little-endian two's complement, at most 8 bytes here
    uint8_t n = 0;
    SP_RETURN_IF_ERROR(Le(&n));
    if (n > 8) return Bad("integer of " + std::to_string(n) + " bytes (at most 8 are read)");
    std::string_view s;
    SP_RETURN_IF_ERROR(Take(n, &s));
    uint64_t u = 0;
    for (size_t i = 0; i < n; ++i) u |= uint64_t{static_cast<uint8_t>(s[i])} << (8 * i);
    if (n > 0 && n < 8 && (static_cast<uint8_t>(s[n - 1]) & 0x80)) u |= ~uint64_t{0} << (8 * n);
    return PushInt(static_cast<int64_t>(u));
  }
  Status OnBinFloat() {  // big-endian double
    std::string_view s;
    SP_RETURN_IF_ERROR(Take(8, &s));
    uint64_t u = 0;
    for (char c : s) u = (u << 8) | static_cast<uint8_t>(c);
    PyValue v;
    v.kind = PyKind::kFloat;
    std::memcpy(&v.f, &u, 8);
    Push(New(std::move(v)));
    return OkStatus();
  }
  template <typename Len, PyKind kKind>
  Status OnBlob() {
    Len n = 0;
    SP_RETURN_IF_ERROR(Le(&n));
    if (n > in_.size() - pos_) return Bad("string of " + std::to_string(n) + " bytes is truncated");
    std::string_view s;
    SP_RETURN_IF_ERROR(Take(static_cast<size_t>(n), &s));
    return PushStr(kKind, s);
  }

  // Containers.
  template <PyKind kKind>
  Status OnEmpty() {
    return PushSeq(kKind, {});
  }
  template <PyKind kKind>
  Status OnMarked() {  // the values since the last MARK
    std::vector<uint32_t> vals;
    SP_RETURN_IF_ERROR(PopMark(&vals));
    return PushSeq(kKind, std::move(vals));
  }
  template <size_t kN>
  Status OnTupleN() {  // the top kN values
    std::vector<uint32_t> vals(kN);
    for (size_t i = kN; i-- > 0;) SP_RETURN_IF_ERROR(Pop(&vals[i]));
    return PushSeq(PyKind::kTuple, std::move(vals));
  }
  Status OnAppend() {
    uint32_t a = 0;
    SP_RETURN_IF_ERROR(Pop(&a));
    return Append({a});
  }
  Status OnAppends() {
    std::vector<uint32_t> vals;
    SP_RETURN_IF_ERROR(PopMark(&vals));
    return Append(vals);
  }
  Status OnDict() {
    std::vector<uint32_t> vals;
    SP_RETURN_IF_ERROR(PopMark(&vals));
    if (vals.size() % 2) return Bad("DICT with an odd number of values");
    return PushSeq(PyKind::kDict, std::move(vals));
  }
  Status OnSetItem() {
    uint32_t key = 0, value = 0;
    SP_RETURN_IF_ERROR(Pop(&value));
    SP_RETURN_IF_ERROR(Pop(&key));
    return SetItems({key, value});
  }
  Status OnSetItems() {
    std::vector<uint32_t> vals;
    SP_RETURN_IF_ERROR(PopMark(&vals));
    return SetItems(vals);
  }

  // The memo.
  template <typename Index>
  Status OnPut() {
    Index i = 0;
    SP_RETURN_IF_ERROR(Le(&i));
    return Put(i);
  }
  Status OnMemoize() { return Put(static_cast<uint32_t>(memo_.size())); }
  template <typename Index>
  Status OnGet() {
    Index i = 0;
    SP_RETURN_IF_ERROR(Le(&i));
    return Get(i);
  }

  // Objects.
  Status OnGlobal() {
    std::string_view module, name;
    SP_RETURN_IF_ERROR(Line(&module));
    SP_RETURN_IF_ERROR(Line(&name));
    return Global(module, name);
  }
  Status OnStackGlobal() {
    uint32_t a = 0, b = 0;
    SP_RETURN_IF_ERROR(Pop(&b));
    SP_RETURN_IF_ERROR(Pop(&a));
    if (tree_.values[a].kind != PyKind::kStr || tree_.values[b].kind != PyKind::kStr) {
      return Bad("STACK_GLOBAL of values that are not strings");
    }
    const std::string module = tree_.values[a].text, name = tree_.values[b].text;
    return Global(module, name);
  }
  Status OnCall() {
    uint32_t args = 0, fn = 0;
    SP_RETURN_IF_ERROR(Pop(&args));
    SP_RETURN_IF_ERROR(Pop(&fn));
    if (tree_.values[fn].kind != PyKind::kGlobal) return Bad("call of a value that is not a class");
    if (tree_.values[args].kind != PyKind::kTuple) return Bad("call arguments are not a tuple");
    PyValue v;
    v.kind = PyKind::kCall;
    v.callable = fn;
    v.args = args;
    Push(New(std::move(v)));
    return OkStatus();
  }
  Status OnBuild() {
    uint32_t obj_at = 0, state = 0;
    SP_RETURN_IF_ERROR(Pop(&state));
    SP_RETURN_IF_ERROR(Top(&obj_at));
    PyValue& obj = tree_.values[obj_at];
    if (obj.kind != PyKind::kCall) return Bad("BUILD on a value that is not an object");
    if (obj.state != kNoValue) return Bad("BUILD twice on one object");
    obj.state = state;
    return OkStatus();
  }
  Status OnBinPersId() {
    uint32_t id = 0;
    SP_RETURN_IF_ERROR(Pop(&id));
    PyValue v;
    v.kind = PyKind::kPersId;
    v.args = id;
    Push(New(std::move(v)));
    return OkStatus();
  }
  std::string_view in_;
  const GlobalAllowed& allowed_;
  const std::string& what_;
  size_t pos_ = 0;
  size_t op_at_ = 0;
  bool stopped_ = false;
  PickleTree tree_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, uint32_t> memo_;
};

}  // namespace

Result<PickleTree> ParsePickle(std::string_view bytes, const GlobalAllowed& allowed,
                               const std::string& what) {
  return Parser(bytes, allowed, what).Run();
}

uint32_t DictGet(const PickleTree& t, uint32_t dict, std::string_view key) {
  if (dict == kNoValue) return kNoValue;
  const PyValue& d = t.at(dict);
  if (d.kind != PyKind::kDict && d.kind != PyKind::kCall) return kNoValue;
  for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
    const PyValue& k = t.at(d.items[i]);
    if (k.kind == PyKind::kStr && k.text == key) return d.items[i + 1];
  }
  return kNoValue;
}

std::string Describe(const PickleTree& t, uint32_t v) {
  if (v == kNoValue) return "nothing";
  const PyValue& x = t.at(v);
  switch (x.kind) {
    case PyKind::kNone:
      return "None";
    case PyKind::kBool:
      return "a bool";
    case PyKind::kInt:
      return "the int " + std::to_string(x.i);
    case PyKind::kFloat:
      return "a float";
    case PyKind::kStr:
      return "a str";
    case PyKind::kBytes:
      return "bytes";
    case PyKind::kTuple:
      return "a tuple of " + std::to_string(x.items.size());
    case PyKind::kList:
      return "a list of " + std::to_string(x.items.size());
    case PyKind::kDict:
      return "a dict";
    case PyKind::kGlobal:
      return "'" + x.text + "'";
    case PyKind::kCall:
      return "a '" + t.at(x.callable).text + "' object";
    case PyKind::kPersId:
      return "a persistent id";
  }
  return "?";
}

}  // namespace shardpoint::internal_dcp
