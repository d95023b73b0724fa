// Op family: Einsum (opset 12).
//
// The equation is parsed here (as ORT does): terms of letters a-z/A-Z and at most one "..." each,
// spaces ignored; without "->" the output is "..." (when an input has one) followed by the letters
// seen exactly once, in ASCII order. Every ellipsis must stand for the same number of dims (ONNX's
// rule; ORT's CPU kernel crashes otherwise), and inputs with a non-empty ellipsis need one in the
// output (ORT's rule). Ellipses are then spelled out with unused letters, so MLX only ever sees an
// explicit equation of letters. Dims of a letter broadcast across operands when one of them is 1,
// as in ORT; a letter repeated within a term (a diagonal) must have equal dims.
//
//  - float32/float64: mx::einsum (its path, diagonals by gather, contractions by matmul).
//  - float16/bfloat16: computed in float32 and rounded once, which is what ORT's CPU kernel returns.
//  - integers: MLX's matmul has none, so each operand first drops its diagonals and the letters no
//    other term needs (a one-operand mx::einsum: gathers and sums only), then the operands are
//    multiplied pairwise and summed exactly (wrapping on overflow, as ORT's kernel does).
//  - 0-d operands (empty terms) are multiplied in at the end; operands with a 0-size dim give zeros.
#include <algorithm>
#include <map>

#include "ops/claim_util.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

bool IsLetter(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }

/** A parsed equation: one term per input and the output term; an ellipsis is kept as one '.'. */
struct Equation {
  std::vector<std::string> inputs;
  std::string output;
};

/** Parses one term into `term`; returns an error or "". */
std::string ParseTerm(const std::string& text, std::string& term) {
  for (size_t i = 0; i < text.size();) {
    if (IsLetter(text[i])) {
      term += text[i++];
    } else if (text.compare(i, 3, "...") == 0) {
      if (term.find('.') != std::string::npos) return "a term has more than one ellipsis";
      term += '.';
      i += 3;
    } else {
      return std::string("unexpected character '") + text[i] + "'";
    }
  }
  return "";
}

/** Parses an Einsum equation into `eq`; returns an error or "". */
std::string ParseEquation(const std::string& text, Equation& eq) {
  std::string s;
  for (char ch : text)
    if (ch != ' ') s += ch;
  const size_t arrow = s.find("->");
  if (arrow != std::string::npos && s.find("->", arrow + 2) != std::string::npos) return "more than one '->'";
  const std::string lhs = s.substr(0, arrow);
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    eq.inputs.emplace_back();
    if (auto e = ParseTerm(lhs.substr(start, comma - start), eq.inputs.back()); !e.empty()) return e;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::map<char, int> counts;
  bool any_ellipsis = false;
  for (const auto& term : eq.inputs)
    for (char ch : term) {
      if (ch == '.')
        any_ellipsis = true;
      else
        ++counts[ch];
    }
  if (arrow == std::string::npos) {  // implicit output
    if (any_ellipsis) eq.output = ".";
    for (const auto& [ch, n] : counts)  // std::map orders by ASCII: upper case first
      if (n == 1) eq.output += ch;
    return "";
  }
  if (auto e = ParseTerm(s.substr(arrow + 2), eq.output); !e.empty()) return e;
  for (size_t i = 0; i < eq.output.size(); ++i) {
    const char ch = eq.output[i];
    if (eq.output.find(ch, i + 1) != std::string::npos) return "the output repeats a letter";
    if (ch != '.' && !counts.count(ch)) return std::string("output letter '") + ch + "' is in no input";
  }
  return "";
}

// mx::einsum picks letters for ellipses from the 52 minus the characters of its equation, commas
// and "->" included, and breaks (std::length_error) when those are more than 52.
constexpr int kMaxLetters = 49;

/** Number of distinct letters of the equation. */
int LetterCount(const Equation& eq) {
  std::string letters = eq.output;
  for (const auto& t : eq.inputs) letters += t;
  std::sort(letters.begin(), letters.end());
  letters.erase(std::unique(letters.begin(), letters.end()), letters.end());
  return static_cast<int>(letters.size()) - (letters.find('.') != std::string::npos ? 1 : 0);
}

Claim ClaimEinsum(const NodeView& v) {
  const Attribute* a = v.node().Attr("equation");
  if (!a || a->kind != Attribute::Kind::kString) return Claim::No("attribute equation is missing");
  Equation eq;
  if (auto e = ParseEquation(a->s, eq); !e.empty()) return Claim::No("equation '" + a->s + "': " + e);
  if (eq.inputs.size() != v.num_inputs()) return Claim::No("the equation's terms do not match the inputs");
  if (LetterCount(eq) > kMaxLetters)
    return Claim::No("more than " + std::to_string(kMaxLetters) + " letters (mx::einsum's limit)");
  const ElemType t = v.input_type(0);
  if (!IsNumeric(t)) return Claim::No(TypeReason(v, 0));
  for (size_t i = 0; i < v.num_inputs(); ++i)
    if (!v.has_input(i) || v.input_type(i) != t) return Claim::No("inputs have different types");
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  return Claim::Yes();
}

/** `x` (letters `have`) transposed and unit-expanded to the letters `want` (a superset). */
mx::array Align(const mx::array& x, const std::string& have, const std::string& want, mx::Stream s) {
  std::vector<int> perm;
  mx::Shape shape;
  for (char ch : want) {
    const size_t p = have.find(ch);
    if (p != std::string::npos) perm.push_back(static_cast<int>(p));
    shape.push_back(p == std::string::npos ? 1 : x.shape(static_cast<int>(p)));
  }
  return mx::reshape(mx::transpose(x, perm, s), shape, s);
}

/** The sum over the letters `summed` of a * b (letters la, lb), an array over the letters `kept`;
 *  chunked along the first summed letter so the broadcast product stays near 2^24 elements. */
mx::array MultiplySum(const mx::array& a, const std::string& la, const mx::array& b, const std::string& lb,
                      const std::string& kept, const std::string& summed, mx::Stream s) {
  const std::string all = kept + summed;
  const mx::array x = Align(a, la, all, s), y = Align(b, lb, all, s);
  if (summed.empty()) return mx::multiply(x, y, s);
  const int p = static_cast<int>(kept.size());
  std::vector<int> axes;
  int64_t per_step = 1;
  for (int d = 0; d < static_cast<int>(all.size()); ++d) {
    if (d >= p) axes.push_back(d);
    if (d != p) per_step *= std::max(x.shape(d), y.shape(d));
  }
  const int n = std::max(x.shape(p), y.shape(p));
  const int chunk =
      static_cast<int>(std::clamp<int64_t>((int64_t{1} << 24) / std::max<int64_t>(per_step, 1), 1, n));
  auto part = [&](const mx::array& z, int k0) {  // z's chunk [k0, k0 + chunk) along p (all of a unit dim)
    if (z.shape(p) == 1) return z;
    mx::Shape start(z.ndim(), 0), stop = z.shape();
    start[p] = k0;
    stop[p] = std::min(n, k0 + chunk);
    return mx::slice(z, start, stop, s);
  };
  std::optional<mx::array> acc;
  for (int k0 = 0; k0 < n; k0 += chunk) {
    const mx::array sum = mx::sum(mx::multiply(part(x, k0), part(y, k0), s), axes, false, s);
    acc = acc ? mx::add(*acc, sum, s) : sum;
  }
  return *acc;
}

/** Letters of `term` (in order, once) that `others` or `out` hold. */
std::string Needed(const std::string& term, const std::vector<std::string>& others, const std::string& out) {
  std::string needed;
  for (char ch : term) {
    if (needed.find(ch) != std::string::npos) continue;
    bool used = out.find(ch) != std::string::npos;
    for (const auto& o : others) used = used || o.find(ch) != std::string::npos;
    if (used) needed += ch;
  }
  return needed;
}

/** Exact integer einsum of explicit letter terms (see the file comment); result in the input dtype. */
mx::array IntegerEinsum(std::vector<std::string> terms, std::vector<mx::array> ops, const std::string& out,
                        mx::Stream s) {
  const mx::Dtype dtype = ops[0].dtype();
  for (size_t i = 0; i < terms.size(); ++i) {
    std::vector<std::string> others = terms;
    others.erase(others.begin() + i);
    const std::string needed = Needed(terms[i], others, out);
    if (needed != terms[i]) {
      ops[i] = mx::einsum(terms[i] + "->" + needed, {ops[i]}, s);
      terms[i] = needed;
    }
  }
  mx::array acc = ops[0];
  std::string letters = terms[0];
  for (size_t j = 1; j < terms.size(); ++j) {
    const std::vector<std::string> later(terms.begin() + j + 1, terms.end());
    const std::string kept = Needed(letters + terms[j], later, out);
    std::string summed;
    for (char ch : letters + terms[j])
      if (kept.find(ch) == std::string::npos && summed.find(ch) == std::string::npos) summed += ch;
    acc = MultiplySum(acc, letters, ops[j], terms[j], kept, summed, s);
    letters = kept;
  }
  return mx::astype(Align(acc, letters, out, s), dtype, s);
}

/** Replaces the '.' of each term by `letters`. */
void SpellEllipses(std::vector<std::string>& terms, const std::string& letters) {
  for (auto& t : terms)
    if (size_t p = t.find('.'); p != std::string::npos) t.replace(p, 1, letters);
}

/** Ellipsis dims of every input (checked to agree; 0 when no input has one). */
int EllipsisRank(const OpContext& c, const Equation& eq) {
  int rank = -1;
  for (size_t i = 0; i < eq.inputs.size(); ++i) {
    const std::string& t = eq.inputs[i];
    const bool ellipsis = t.find('.') != std::string::npos;
    const int n = static_cast<int>(c.input(i).ndim()) - static_cast<int>(t.size()) + (ellipsis ? 1 : 0);
    if (!ellipsis && n != 0) c.Fail("input " + std::to_string(i) + " has a rank other than its term's");
    if (!ellipsis) continue;
    if (n < 0) c.Fail("input " + std::to_string(i) + " has fewer dims than its term");
    if (rank >= 0 && n != rank) c.Fail("ellipses stand for different numbers of dims");
    rank = n;
  }
  return std::max(rank, 0);
}

/** Size of every letter: equal wherever it occurs (within a term strictly, across terms or 1). */
std::map<char, int> LetterDims(const OpContext& c, const std::vector<std::string>& terms) {
  std::map<char, int> dims;
  for (size_t i = 0; i < terms.size(); ++i) {
    std::map<char, int> own;
    for (size_t d = 0; d < terms[i].size(); ++d) {
      const char ch = terms[i][d];
      const int n = c.input(i).shape(static_cast<int>(d));
      if (own.count(ch) && own[ch] != n) c.Fail(std::string("the diagonal '") + ch + "' is not square");
      own[ch] = n;
      auto [it, fresh] = dims.insert({ch, n});
      if (fresh || it->second == n || n == 1) continue;
      if (it->second != 1) c.Fail(std::string("dims of letter '") + ch + "' cannot be broadcast");
      it->second = n;
    }
  }
  return dims;
}

/** Spells the ellipses of `eq`'s input terms out with letters no term uses (after checking them
 *  against the inputs' ranks); returns the output term spelled out alike. */
std::string SpellOutEllipses(const OpContext& c, Equation& eq) {
  const int ellipsis = EllipsisRank(c, eq);
  if (ellipsis > 0 && eq.output.find('.') == std::string::npos)
    c.Fail("inputs have ellipses but the output has none");
  if (LetterCount(eq) + ellipsis > kMaxLetters)
    c.Fail("more than " + std::to_string(kMaxLetters) + " letters with the ellipsis spelled out");
  std::string spare;
  for (const char* range : {"az", "AZ"})
    for (char ch = range[0]; ch <= range[1]; ++ch) {
      bool used = eq.output.find(ch) != std::string::npos;
      for (const auto& t : eq.inputs) used = used || t.find(ch) != std::string::npos;
      if (!used && static_cast<int>(spare.size()) < ellipsis) spare += ch;
    }
  std::vector<std::string> out{eq.output};
  SpellEllipses(eq.inputs, spare);
  SpellEllipses(out, spare);
  return out[0];
}

std::vector<mx::array> TranslateEinsum(const OpContext& c) {
  const mx::Stream s = c.stream;
  Equation eq;
  if (auto e = ParseEquation(c.node.AttrString("equation", ""), eq); !e.empty()) c.Fail(e);
  if (eq.inputs.size() != c.num_inputs()) c.Fail("the equation's terms do not match the inputs");
  const std::string out = SpellOutEllipses(c, eq);
  const std::map<char, int> dims = LetterDims(c, eq.inputs);

  mx::Shape out_shape;
  for (char ch : out) out_shape.push_back(dims.at(ch));
  const mx::Dtype dtype = c.input(0).dtype();
  std::vector<std::string> terms;
  std::vector<mx::array> ops, scalars;
  bool empty = false;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    empty = empty || c.input(i).size() == 0;
    if (eq.inputs[i].empty()) {
      scalars.push_back(c.input(i));
      continue;
    }
    terms.push_back(eq.inputs[i]);
    ops.push_back(c.input(i));
  }
  if (empty) return {mx::zeros(out_shape, dtype, s)};

  const bool low_float = dtype == mx::float16 || dtype == mx::bfloat16;
  const mx::Dtype compute = low_float ? mx::float32 : dtype;
  std::optional<mx::array> y;
  if (!ops.empty() && mx::issubdtype(dtype, mx::integer)) {
    y = IntegerEinsum(terms, ops, out, s);
  } else if (!ops.empty()) {
    std::string expr;
    for (size_t i = 0; i < terms.size(); ++i) {
      expr += (i ? "," : "") + terms[i];
      ops[i] = mx::astype(ops[i], compute, s);
    }
    y = mx::einsum(expr + "->" + out, ops, s);
  }
  for (const mx::array& x : scalars)
    y = y ? mx::multiply(*y, mx::astype(x, compute, s), s) : mx::astype(x, compute, s);
  return {mx::astype(*y, dtype, s)};
}

}  // namespace

void RegisterEinsumOps(OpRegistry& r) {
  // Einsum-12; Einsum-28 (bfloat16) is newer than ORT's opsets.
  r.Add({"", "Einsum", 12, 12, ClaimEinsum, TranslateEinsum});
}

}  // namespace mlx_ep
