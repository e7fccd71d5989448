// Applying mapping rules: names and shapes both ways, and the pieces.
#include "src/hf/mapping.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>

#include "src/geometry/gqa.h"

using shardpoint::internal_geometry::GqaGroupRuns;
using shardpoint::internal_geometry::GqaPartRows;
using shardpoint::internal_geometry::GqaRun;

namespace shardpoint::internal_hf {
namespace {

bool IsDecimal(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

Result<int64_t> Resolve(const std::string& s, const Vars& vars, const std::string& what) {
  if (IsDecimal(s)) return static_cast<int64_t>(std::stoll(s));
  auto it = vars.find(s);
  if (it == vars.end()) {
    return InvalidArgumentError(
        what + ": variable '" + s +
        "' is not set (config.json, a Megatron checkpoint's args, the mapping's "
        "\"variables\" or --set)");
  }
  return it->second;
}

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape Tail(const Shape& s) { return Shape(s.begin() + (s.empty() ? 0 : 1), s.end()); }

// The pieces of one rule instance. parts[i]: the per-instance shape of HF
// part i; stack: the sizes of the stacked leading dims, one per placeholder
// of r.rule.stack (empty: not stacked).
Result<MappedKey> Expand(const CompiledRule& r, const Bindings& b, const std::vector<Shape>& parts,
                         const Shape& stack, DType dtype, const Vars& vars) {
  MappedKey mk;
  SP_ASSIGN_OR_RETURN(mk.info.key, r.sp.Format(b));
  const std::string where = "key '" + mk.info.key + "' (rule '" + r.rule.sp + "')";
  mk.info.dtype = dtype;
  mk.info.split = r.rule.split;

  // Per-expert pieces: (part, element offset in part, box in the per-expert tensor).
  struct Local {
    size_t part;
    int64_t offset;
    Box box;
  };
  std::vector<Local> local;
  Shape shape;
  if (r.fuse == HfFuse::kConcat) {
    const size_t rank = parts[0].size();
    const int d = r.rule.dim;
    if (static_cast<size_t>(d) >= rank && parts.size() > 1) {
      return InvalidArgumentError(where + ": concat dim " + std::to_string(d) +
                                  " out of range for rank " + std::to_string(rank));
    }
    shape = parts[0];
    int64_t at = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const Shape& p = parts[i];
      bool ok = p.size() == rank;
      for (size_t k = 0; ok && k < rank; ++k) ok = static_cast<int>(k) == d || p[k] == shape[k];
      if (!ok) {
        return InvalidArgumentError(where + ": part " + r.hf[i].text() + " has shape " +
                                    ShapeToString(p) + ", which does not concat with " +
                                    ShapeToString(parts[0]) + " along dim " + std::to_string(d));
      }
      Box box = Box::Whole(p);
      if (parts.size() > 1) box.offset[d] = at;
      local.push_back({i, 0, box});
      if (parts.size() > 1) at += p[d];
    }
    if (parts.size() > 1) shape[d] = at;
  } else {  // gqa
    SP_ASSIGN_OR_RETURN(int64_t h, Resolve(r.rule.heads, vars, where));
    SP_ASSIGN_OR_RETURN(int64_t g, Resolve(r.rule.groups, vars, where));
    const Shape& q = parts[0];
    if (h <= 0 || g <= 0 || h % g != 0 || q.empty() || parts[1].empty() || parts[1][0] % g != 0) {
      return InvalidArgumentError(where +
                                  ": gqa needs heads divisible by groups and row counts "
                                  "divisible by them (heads " +
                                  std::to_string(h) + ", groups " + std::to_string(g) + ")");
    }
    const int64_t dim = parts[1][0] / g;
    const Shape tail = Tail(q);
    if (q[0] != h * dim || parts[1] != parts[2] || Tail(parts[1]) != tail) {
      return InvalidArgumentError(where + ": q " + ShapeToString(q) + ", k " +
                                  ShapeToString(parts[1]) + ", v " + ShapeToString(parts[2]) +
                                  " do not fit " + std::to_string(h) + " heads in " +
                                  std::to_string(g) + " groups");
    }
    const int64_t row = Numel(tail);
    shape = q;
    shape[0] = (h + 2 * g) * dim;
    for (int64_t j = 0; j < g; ++j) {
      for (const GqaRun& run : GqaGroupRuns(h, g, dim, j)) {
        Box box = Box::Whole(q);
        box.offset[0] = run.dst_row;
        box.shape[0] = run.rows;
        local.push_back({static_cast<size_t>(run.part), run.src_row * row, box});
      }
    }
  }

  const int64_t n = Numel(stack);
  mk.info.shape = stack;
  mk.info.shape.insert(mk.info.shape.end(), shape.begin(), shape.end());
  Bindings hb = b;
  Shape at(stack.size(), 0);  // the stacked indices of instance e, row-major
  for (int64_t e = 0; e < n; ++e) {
    for (int64_t rest = e, k = static_cast<int64_t>(stack.size()) - 1; k >= 0; --k) {
      at[k] = rest % stack[k];
      rest /= stack[k];
      hb[r.rule.stack[k]] = at[k];
    }
    std::vector<std::string> names;
    for (size_t i = 0; i < parts.size(); ++i) {
      SP_ASSIGN_OR_RETURN(std::string name, r.hf[i].Format(hb));
      mk.hf_tensors.push_back({name, dtype, parts[i]});
      mk.info.hf.push_back(name);
      names.push_back(std::move(name));
    }
    for (const Local& l : local) {
      Box box = l.box;
      box.offset.insert(box.offset.begin(), at.begin(), at.end());
      box.shape.insert(box.shape.begin(), stack.size(), 1);
      mk.pieces.push_back({names[l.part], l.offset, std::move(box)});
    }
  }
  if (r.fuse == HfFuse::kGqa) {
    SP_ASSIGN_OR_RETURN(mk.info.heads, Resolve(r.rule.heads, vars, where));
    SP_ASSIGN_OR_RETURN(mk.info.groups, Resolve(r.rule.groups, vars, where));
  }
  return mk;
}

MappedKey Identity(const HfMeta& t) {
  MappedKey mk;
  mk.info.key = t.name;
  mk.info.dtype = t.dtype;
  mk.info.shape = t.shape;
  mk.info.split = "replicated";
  mk.info.hf = {t.name};
  mk.pieces.push_back({t.name, 0, Box::Whole(t.shape)});
  mk.hf_tensors.push_back(t);
  return mk;
}

}  // namespace

bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      std::string_view x(a.data() + i, ie - i), y(b.data() + j, je - j);
      while (x.size() > 1 && x[0] == '0') x.remove_prefix(1);
      while (y.size() > 1 && y[0] == '0') y.remove_prefix(1);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = ie, j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  if ((a.size() - i) != (b.size() - j)) return a.size() - i < b.size() - j;
  return a < b;
}

Result<std::vector<MappedKey>> MapHfToKeys(const HfMapping& mapping, const std::vector<HfMeta>& hf,
                                           const Vars& vars) {
  SP_ASSIGN_OR_RETURN(std::vector<CompiledRule> rules, CompileMapping(mapping));
  struct Instance {
    size_t rule;
    Bindings b;
    // stacked indices (empty: not stacked) -> parts
    std::map<Shape, std::vector<const HfMeta*>> parts;
  };
  std::map<std::string, Instance> instances;
  std::vector<MappedKey> out;
  for (const HfMeta& t : hf) {
    bool matched = false;
    for (size_t r = 0; r < rules.size() && !matched; ++r) {
      for (size_t i = 0; i < rules[r].hf.size() && !matched; ++i) {
        std::optional<Bindings> b = rules[r].hf[i].Match(t.name);
        if (!b) continue;
        matched = true;
        Shape e;
        for (const std::string& st : rules[r].rule.stack) {
          e.push_back((*b)[st]);
          b->erase(st);
        }
        SP_ASSIGN_OR_RETURN(std::string key, rules[r].sp.Format(*b));
        Instance& inst = instances.try_emplace(key, Instance{r, *b, {}}).first->second;
        if (inst.rule != r) {
          return InvalidArgumentError("HF tensor '" + t.name + "' maps to key '" + key +
                                      "', which another rule also produces");
        }
        auto& slot = inst.parts[e];
        slot.resize(rules[r].hf.size(), nullptr);
        slot[i] = &t;
      }
    }
    if (!matched) {
      if (!mapping.keep_unmatched) {
        return InvalidArgumentError("no rule of mapping '" + mapping.name +
                                    "' matches HF tensor '" + t.name + "'");
      }
      out.push_back(Identity(t));
    }
  }
  for (const auto& [key, inst] : instances) {
    const CompiledRule& r = rules[inst.rule];
    // The stacked dims: one past the largest index of each placeholder; every
    // index tuple below them must be there (the map iterates them row-major).
    const size_t ns = r.rule.stack.size();
    Shape stack(ns, 0);
    for (const auto& [e, parts] : inst.parts) {
      for (size_t k = 0; k < ns; ++k) stack[k] = std::max(stack[k], e[k] + 1);
    }
    std::vector<Shape> shapes;
    DType dtype = DType::kF32;
    Shape want(ns, 0);
    auto missing = [&]() {
      std::string which;
      for (size_t k = 0; k < ns; ++k) {
        which += (k ? ", {" : "{") + r.rule.stack[k] + "} = " + std::to_string(want[k]);
      }
      return InvalidArgumentError("key '" + key + "': HF tensors for " + which + " are missing");
    };
    for (const auto& [e, parts] : inst.parts) {
      if (e != want) return missing();
      for (size_t k = ns; k-- > 0;) {  // the next tuple, row-major
        if (++want[k] < stack[k]) break;
        want[k] = 0;
      }
      for (size_t i = 0; i < parts.size(); ++i) {
        if (!parts[i]) {
          Bindings hb = inst.b;
          for (size_t k = 0; k < ns; ++k) hb[r.rule.stack[k]] = e[k];
          Result<std::string> name = r.hf[i].Format(hb);
          return InvalidArgumentError("key '" + key + "': HF tensor '" +
                                      (name.ok() ? *name : r.hf[i].text()) + "' is missing");
        }
        if (e == inst.parts.begin()->first && i == 0) dtype = parts[i]->dtype;
        if (parts[i]->dtype != dtype) {
          return InvalidArgumentError("key '" + key + "': HF tensor '" + parts[i]->name +
                                      "' has dtype " + std::string(DTypeName(parts[i]->dtype)) +
                                      ", its other parts " + std::string(DTypeName(dtype)));
        }
        if (e == inst.parts.begin()->first) {
          shapes.push_back(parts[i]->shape);
        } else if (parts[i]->shape != shapes[i]) {
          return InvalidArgumentError("key '" + key + "': HF tensor '" + parts[i]->name +
                                      "' has shape " + ShapeToString(parts[i]->shape) +
                                      ", other experts " + ShapeToString(shapes[i]));
        }
      }
    }
    if (static_cast<int64_t>(inst.parts.size()) != Numel(stack)) return missing();
    SP_ASSIGN_OR_RETURN(MappedKey mk, Expand(r, inst.b, shapes, stack, dtype, vars));
    out.push_back(std::move(mk));
  }
  std::sort(out.begin(), out.end(),
            [](const MappedKey& a, const MappedKey& b) { return a.info.key < b.info.key; });
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].info.key == out[i - 1].info.key) {
      return InvalidArgumentError("two HF tensors map to key '" + out[i].info.key + "'");
    }
  }
  return out;
}

Result<std::vector<MappedKey>> MapKeysToHf(const HfMapping& mapping,
                                           const std::vector<HfMeta>& keys, const Vars& vars) {
  SP_ASSIGN_OR_RETURN(std::vector<CompiledRule> rules, CompileMapping(mapping));
  std::vector<MappedKey> out;
  std::unordered_map<std::string, std::string> produced;  // HF name -> key
  for (const HfMeta& k : keys) {
    if (std::any_of(mapping.skip.begin(), mapping.skip.end(),
                    [&k](const std::string& p) { return k.name.rfind(p, 0) == 0; })) {
      continue;  // not part of the HF model (optimizer state, say)
    }
    const CompiledRule* rule = nullptr;
    std::optional<Bindings> b;
    for (const CompiledRule& r : rules) {
      if ((b = r.sp.Match(k.name))) {
        rule = &r;
        break;
      }
    }
    MappedKey mk;
    if (!rule) {
      if (!mapping.keep_unmatched) {
        return InvalidArgumentError("no rule of mapping '" + mapping.name + "' matches key '" +
                                    k.name + "'");
      }
      mk = Identity(k);
    } else {
      const std::string where = "key '" + k.name + "' " + ShapeToString(k.shape);
      const size_t ns = rule->rule.stack.size();
      if (k.shape.size() < ns) {
        return InvalidArgumentError(where + ": a key stacked over " + std::to_string(ns) +
                                    " dims has rank " + std::to_string(k.shape.size()));
      }
      const Shape stack(k.shape.begin(), k.shape.begin() + ns);
      const Shape s(k.shape.begin() + ns, k.shape.end());
      const size_t n = rule->hf.size();
      std::vector<Shape> parts(n, s);
      if (rule->fuse == HfFuse::kGqa) {
        SP_ASSIGN_OR_RETURN(int64_t h, Resolve(rule->rule.heads, vars, where));
        SP_ASSIGN_OR_RETURN(int64_t g, Resolve(rule->rule.groups, vars, where));
        if (s.empty() || h <= 0 || g <= 0 || s[0] % (h + 2 * g) != 0) {
          return InvalidArgumentError(where + ": rows are not (heads + 2 * groups) * head_dim");
        }
        const int64_t d = s[0] / (h + 2 * g);
        const std::array<int64_t, 3> rows = GqaPartRows(h, g, d);
        for (size_t i = 0; i < 3; ++i) parts[i][0] = rows[i];
      } else if (n > 1) {
        const int d = rule->rule.dim;
        if (static_cast<size_t>(d) >= s.size()) {
          return InvalidArgumentError(where + ": concat dim " + std::to_string(d) +
                                      " out of range");
        }
        int64_t sum = 0;
        for (size_t i = 0; i < n; ++i) {
          if (rule->rule.sizes.empty()) {
            if (s[d] % static_cast<int64_t>(n) != 0) {
              return InvalidArgumentError(where + ": dim " + std::to_string(d) +
                                          " does not split into " + std::to_string(n) +
                                          " equal parts (give \"sizes\")");
            }
            parts[i][d] = s[d] / static_cast<int64_t>(n);
          } else {
            SP_ASSIGN_OR_RETURN(parts[i][d], Resolve(rule->rule.sizes[i], vars, where));
          }
          sum += parts[i][d];
        }
        if (sum != s[d]) {
          return InvalidArgumentError(where + ": \"sizes\" sum to " + std::to_string(sum) +
                                      ", not " + std::to_string(s[d]));
        }
      }
      const std::string& rows_of = rule->rule.rows;
      const bool trim = !rows_of.empty();
      if (trim && !IsDecimal(rows_of) && vars.count(rows_of) == 0) {
        // Keeping the padded rows would write a model whose vocabulary is
        // not the config's; say how to give the true size instead.
        return InvalidArgumentError(
            where + ": \"rows\" variable '" + rows_of +
            "' is not defined (not in config.json, a Megatron checkpoint's args, the mapping's "
            "variables or the explicit variables), so the padding rows cannot be cut: pass the "
            "true size with --set " +
            rows_of + "=N (ExportHfOptions::variables from C++)" +
            (s.empty() ? "" : "; N = " + std::to_string(s[0]) + " keeps every row"));
      }
      if (trim) {
        SP_ASSIGN_OR_RETURN(int64_t rows, Resolve(rows_of, vars, where));
        if (s.empty() || rows > s[0]) {
          return InvalidArgumentError(where + ": \"rows\" " + rows_of + " = " +
                                      std::to_string(rows) + " is more than the key has (" +
                                      (s.empty() ? "0-d" : std::to_string(s[0])) + ")");
        }
        parts[0][0] = rows;  // the padding rows [rows, s[0]) are not exported
      }
      SP_ASSIGN_OR_RETURN(mk, Expand(*rule, *b, parts, stack, k.dtype, vars));
      if (trim) mk.info.shape = k.shape;  // the key keeps its padded shape
    }
    for (const HfMeta& t : mk.hf_tensors) {
      auto [it, fresh] = produced.emplace(t.name, k.name);
      if (!fresh) {
        return InvalidArgumentError("keys '" + it->second + "' and '" + k.name +
                                    "' both map to HF tensor '" + t.name + "'");
      }
    }
    out.push_back(std::move(mk));
  }
  return out;
}

}  // namespace shardpoint::internal_hf
