// The `dsv41 cost` table and JSON object (see cost_report.h).
#include "cost/cost_report.h"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dsv41 {
namespace {

// 1234567.5 → "1,234,567.5"; `decimals` < 0 prints at most 2 decimals, none if integral.
std::string commas(double v, int decimals = -1) {
  if (decimals < 0) decimals = std::fabs(v - std::round(v)) < 1e-9 ? 0 : 2;
  std::string s = fmt::format("{:.{}f}", std::fabs(v), decimals);
  const size_t dot = s.find('.');
  std::string head = s.substr(0, dot), tail = dot == std::string::npos ? "" : s.substr(dot);
  if (decimals > 0)  // drop trailing zeros of a fraction ("3514.25", not "3514.250")
    while (tail.size() > 1 && tail.back() == '0') tail.pop_back();
  if (tail == ".") tail.clear();
  std::string out;
  for (size_t i = 0; i < head.size(); ++i) {
    if (i > 0 && (head.size() - i) % 3 == 0) out += ',';
    out += head[i];
  }
  return (v < 0 ? "-" : "") + out + tail;
}

std::string context_label(int64_t c) {
  if (c >= (1 << 20) && c % (1 << 20) == 0) return fmt::format("{}M", c >> 20);
  if (c >= 1024 && c % 1024 == 0) return fmt::format("{}K", c >> 10);
  return commas(double(c));
}

std::string bytes_human(double b) {
  if (b >= double(1 << 30)) return fmt::format("{:.3g} GiB", b / double(1 << 30));
  if (b >= double(1 << 20)) return fmt::format("{:.3g} MiB", b / double(1 << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", b / 1024);
  return fmt::format("{} B", commas(b));
}

// Greedy word wrap of `text` to `width` columns, every line prefixed by `indent`.
std::string wrap(const std::string& text, size_t width, const std::string& indent) {
  std::string out, line;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += indent + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  if (!line.empty()) out += indent + line + "\n";
  return out;
}

std::string giga(double flops) { return fmt::format("{:.2f}", flops / 1e9); }

std::string layer_range(int a, int b) { return a == b ? fmt::format("{}", a) : fmt::format("{}–{}", a, b); }

const std::vector<int64_t>& contexts_of(const CostQuery& q, std::vector<int64_t>& storage) {
  storage = q.contexts.empty() ? default_contexts() : q.contexts;
  return storage;
}

}  // namespace

std::vector<int64_t> default_contexts() { return {4096, 16384, 65536, 131072, 262144, 524288, 1048576}; }

Result<int64_t> parse_token_count(const std::string& text) {
  constexpr int64_t kMax = int64_t(1) << 40;
  int64_t value = 0;
  size_t i = 0, digits = 0;
  for (; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == ',' || ch == '_') continue;
    if (ch < '0' || ch > '9') break;
    value = value * 10 + (ch - '0');
    ++digits;
    if (value > kMax) return out_of_range("token count '" + text + "' is larger than 2^40");
  }
  int64_t unit = 1;
  if (i < text.size() && i + 1 == text.size()) {
    const char suffix = text[i];
    if (suffix == 'K' || suffix == 'k') unit = 1024;
    else if (suffix == 'M' || suffix == 'm') unit = int64_t(1) << 20;
    else unit = 0;
    ++i;
  }
  if (digits == 0 || i != text.size() || unit == 0)
    return invalid_argument("token count '" + text + "' is not a number like 4096, 4K or 1M");
  if (value == 0) return invalid_argument("token count '" + text + "' must be positive");
  if (value > kMax / unit) return out_of_range("token count '" + text + "' is larger than 2^40");
  return value * unit;
}

Result<std::string> format_cost_table(const CostModel& m, const CostQuery& q) {
  DSV41_ASSIGN_OR_RETURN(const PrefillCost p, prefill_cost(m, q.new_tokens));
  std::string o;
  const int n_layers = int(m.layers.size());
  o += fmt::format("{}\n", generation_name(m.generation));
  o += fmt::format("config: {}  (model_type {})\n", m.source, m.model_type.empty() ? "?" : m.model_type);
  o += wrap(m.geometry, 120, "") + "\n";

  o += "Cache records (sizes from the config's channel counts; encodings from the cited release)\n";
  for (const auto& r : m.records)
    o += fmt::format("  {:<32} {:>8} B   {}\n      source: {}\n", r.role, commas(r.bytes), r.encoding, r.source);

  // Per-layer table, consecutive identical layers folded into one row.
  o += "\nLayers (global B/tok: bytes each context token leaves in the layer's own cache; window: rows × bytes kept\n"
       "per sequence; weights: precision-weighted GFLOP per decoded token)\n";
  o += fmt::format("  {:<9} {:<8} {:>5}  {:<14} {:>12} {:>14} {:>15} {:>14}\n", "layers", "kind", "ratio", "reads/extra",
                   "entry B", "global B/tok", "window rows×B", "weights GF/tok");
  for (int i = 0; i < n_layers;) {
    const LayerCost& a = m.layers[i];
    int j = i;
    while (j + 1 < n_layers) {
      const LayerCost& b = m.layers[j + 1];
      if (b.kind != a.kind || b.ratio != a.ratio || b.work.ratio != a.work.ratio || b.reads != a.reads ||
          b.global_bytes_per_token != a.global_bytes_per_token || b.window_rows != a.window_rows ||
          std::fabs(b.weight_flops.weighted() - a.weight_flops.weighted()) > 1.0)
        break;
      ++j;
    }
    const double entry = a.main_record_bytes + a.index_record_bytes;
    const std::string entry_s =
        entry == 0 ? "-"
        : a.index_record_bytes > 0 ? fmt::format("{}+{}", commas(a.main_record_bytes), commas(a.index_record_bytes))
                                   : commas(entry);
    const int ratio_shown = a.ratio > 0 ? a.ratio : a.work.ratio;
    o += fmt::format("  {:<9} {:<8} {:>5}  {:<14} {:>12} {:>14} {:>15} {:>14}\n", layer_range(a.index, m.layers[j].index),
                     a.kind, ratio_shown > 0 ? fmt::format("{}", ratio_shown) : "-", a.reads.empty() ? "-" : a.reads,
                     entry_s, a.global_bytes_per_token > 0 ? commas(a.global_bytes_per_token) : "-",
                     a.window_rows > 0 ? fmt::format("{}×{}", a.window_rows, commas(a.window_row_bytes)) : "-",
                     fmt::format("{:.3f}", a.weight_flops.weighted() / 1e9));
    i = j + 1;
  }

  // The four costs.
  const double glob = m.global_kv_bytes_per_token();
  o += "\nThe four costs (system.md §1)\n";
  o += fmt::format("  1. global KV          {:>12} B/token   {:g} cache entries/token; {} for a 1M-token context\n",
                   commas(glob), m.global_entries_per_token(), bytes_human(glob * double(1 << 20)));
  o += fmt::format("  2. persistent         {:>12} B/token   ({:.3f} × global KV)\n",
                   commas(m.persistent_bytes_per_token()), m.persistent_bytes_per_token() / glob);
  o += wrap("= " + m.persistent_definition, 92, "     ");
  const double win = m.window_bytes_per_sequence();
  if (win > 0)
    o += fmt::format("     window state       {:>12}         per sequence, independent of context (not global KV)\n",
                     bytes_human(win));
  // Prefill: the three depths of the engine's replay rule for one cold prompt of N tokens.
  const std::string n_text = commas(double(q.new_tokens));
  auto share = [&](double t) { return fmt::format("{:.3f} × full depth", t / p.full_depth); };
  o += fmt::format(
      "  3. prefill N={}: token-layers of a cold prompt, from the engine's replay rule (plan/replay_rule.h)\n", n_text);
  o += fmt::format("     full depth        {:>14}   N·L\n", commas(p.full_depth));
  if (m.ced) {
    auto fell_back = [](PrefillDepth e) { return e == PrefillDepth::kFull ? "; N fits: runs full depth" : ""; };
    o += fmt::format("     bounded (CED)     {:>14}   {}  (encoder {}, decoder {}{})\n", commas(p.token_layers),
                     share(p.token_layers), commas(double(p.bounded.encoder)), commas(double(p.bounded.decoder)),
                     fell_back(p.bounded_effective));
    o += fmt::format("       paper's formula {:>14}   {}  N·L_enc + min(N,w)·L_dec = {}·{} + {}·{}\n",
                     commas(p.paper_ced), share(p.paper_ced), n_text, m.decoder_start,
                     std::min<int64_t>(q.new_tokens, m.window), n_layers - m.decoder_start);
    o += fmt::format("                                        (without layer {}'s compressor-only rows, which the replay "
                     "rule counts)\n",
                     m.decoder_start);
    const double exact = token_layers_total(p.exact);
    o += fmt::format("     exact (pyramid)   {:>14}   {}  (encoder {}, decoder {}{})\n", commas(exact), share(exact),
                     commas(double(p.exact.encoder)), commas(double(p.exact.decoder)), fell_back(p.exact_effective));
  } else {
    o += fmt::format("     bounded, exact    {:>14}   {}  (no CED decoder to bound: every uncached token runs every "
                     "layer)\n",
                     commas(p.token_layers), share(p.token_layers));
  }

  o += "  4. decode GFLOP per generated token, precision-weighted F = F_BF16 + 0.5·F_FP8 + 0.25·F_FP4\n";
  o += fmt::format("     {:>8} {:>10} {:>11} {:>10} {:>10} {:>11} {:>8}\n", "context", "weights", "attention", "indexer",
                   "F", "raw total", "F/F0");
  std::vector<int64_t> storage;
  double first = 0;
  bool beyond_any = false;
  for (int64_t c : contexts_of(q, storage)) {
    const DecodeFlops d = decode_flops(m, c);
    if (first == 0) first = d.weighted();
    const bool beyond = m.max_context > 0 && c > m.max_context;
    beyond_any = beyond_any || beyond;
    o += fmt::format("     {:>8} {:>10} {:>11} {:>10} {:>10} {:>11} {:>7.2f}×\n", context_label(c) + (beyond ? "*" : ""),
                     giga(d.weights.weighted()), giga(d.attention.weighted()), giga(d.indexer.weighted()),
                     giga(d.weighted()), giga(d.total.total()), d.weighted() / first);
  }
  if (beyond_any)
    o += fmt::format("     * beyond the config's max_position_embeddings ({}): extrapolated\n", commas(double(m.max_context)));
  o += wrap("weights: " + m.weight_note + ".", 100, "     ");
  o += wrap("attention: q·k and value sums over the window rows and the selected (or all) cached entries, per "
            "head, BF16. indexer: scoring of cached index keys with the index query.",
            100, "     ");

  // Every counted operation with its operand pair and the rate that pair runs at.
  const std::vector<int64_t>& ctx = contexts_of(q, storage);
  const DecodeFlops lo = decode_flops(m, ctx.front()), hi = decode_flops(m, ctx.back());
  o += "\n  Operations: a multiply of A (weights, or index query) by B (activations, or cached keys) runs at the rate\n"
       "  of its wider operand: any BF16 side → 1, FP8 × FP8 or FP4 × FP8 → 0.5, only FP4 × FP4 → 0.25\n";
  const std::string at_lo = fmt::format("@{}", context_label(ctx.front()));
  const std::string at_hi = fmt::format("@{}", context_label(ctx.back()));
  o += fmt::format("     {:<26} {:<12} {:<11} {:>12} {:>10} {:>10}\n", "operation", "A × B", "rate", "raw GF" + at_lo,
                   "F" + at_lo, "F" + at_hi);
  for (const OpFlops& op : lo.ops.ops) {
    double at_high = 0;
    for (const OpFlops& h : hi.ops.ops)
      if (h.op == op.op && h.operands == op.operands) at_high = h.weighted();
    o += fmt::format("     {:<26} {:<12} {:<11} {:>12} {:>10} {:>10}\n", op.op, op.operands.name(),
                     fmt::format("{} {:g}", precision_name(op.operands.rate()), precision_weight(op.operands.rate())),
                     giga(op.flops), giga(op.weighted()), giga(at_high));
  }
  if (!m.assumptions.empty()) {
    o += "\nAssumptions\n";
    for (const auto& a : m.assumptions) {
      const std::string w = wrap(a, 96, "    ");
      o += "  -" + w.substr(3);
    }
  }
  return o;
}

Result<std::string> format_cost_json(const CostModel& m, const CostQuery& q) {
  using nlohmann::json;
  DSV41_ASSIGN_OR_RETURN(const PrefillCost p, prefill_cost(m, q.new_tokens));
  json j;
  j["config"] = m.source;
  j["model_type"] = m.model_type;
  j["generation"] = generation_name(m.generation);
  j["num_layers"] = m.layers.size();
  j["geometry"] = m.geometry;
  j["max_position_embeddings"] = m.max_context;
  j["global_kv_bytes_per_token"] = m.global_kv_bytes_per_token();
  j["global_entries_per_token"] = m.global_entries_per_token();
  j["persistent_bytes_per_token"] = m.persistent_bytes_per_token();
  j["persistent_definition"] = m.persistent_definition;
  j["window_bytes_per_sequence"] = m.window_bytes_per_sequence();
  json layers = json::array(), details = json::array();
  for (const auto& l : m.layers) {
    layers.push_back(l.global_bytes_per_token);
    details.push_back({{"layer", l.index},
                       {"kind", l.kind},
                       {"ratio", l.ratio > 0 ? l.ratio : l.work.ratio},
                       {"reads", l.reads},
                       {"main_record_bytes", l.main_record_bytes},
                       {"index_record_bytes", l.index_record_bytes},
                       {"global_bytes_per_token", l.global_bytes_per_token},
                       {"window_rows", l.window_rows},
                       {"window_row_bytes", l.window_row_bytes},
                       {"weight_flops_weighted", l.weight_flops.weighted()}});
  }
  j["layers"] = layers;
  j["layer_details"] = details;
  json records = json::array();
  for (const auto& r : m.records)
    records.push_back({{"role", r.role}, {"encoding", r.encoding}, {"bytes", r.bytes}, {"source", r.source}});
  j["records"] = records;
  auto depth = [&](const TokenLayers& t, PrefillDepth effective) {
    return json{{"encoder", t.encoder},
                {"decoder", t.decoder},
                {"replay", t.replay},
                {"total", token_layers_total(t)},
                {"ratio_to_full_depth", token_layers_total(t) / p.full_depth},
                {"effective", prefill_depth_name(effective)}};
  };
  // token_layers = the bounded count (what the generation runs by default), from the replay rule.
  j["prefill_token_layers"] = {{"new_tokens", p.new_tokens},
                               {"token_layers", p.token_layers},
                               {"full_depth", p.full_depth},
                               {"ratio_to_full_depth", p.token_layers / p.full_depth},
                               {"ced", m.ced},
                               {"encoder_part", p.encoder_part},
                               {"decoder_part", p.decoder_part},
                               {"paper_ced", p.paper_ced},
                               {"bounded", depth(p.bounded, p.bounded_effective)},
                               {"exact", depth(p.exact, p.exact_effective)}};
  j["precision_rule"] =
      "F = F_BF16 + 0.5·F_FP8 + 0.25·F_FP4; each multiply counts at the rate of its wider operand (A × B)";
  json decode = json::array();
  std::vector<int64_t> storage;
  for (int64_t c : contexts_of(q, storage)) {
    const DecodeFlops d = decode_flops(m, c);
    auto split = [](const PrecisionFlops& f) {
      return json{{"bf16", f.bf16}, {"fp8", f.fp8}, {"fp4", f.fp4}, {"weighted", f.weighted()}};
    };
    json ops = json::array();
    for (const OpFlops& op : d.ops.ops)
      ops.push_back({{"op", op.op},
                     {"a", precision_name(op.operands.a)},
                     {"b", precision_name(op.operands.b)},
                     {"rate", precision_name(op.operands.rate())},
                     {"rate_weight", precision_weight(op.operands.rate())},
                     {"flops", op.flops},
                     {"weighted", op.weighted()}});
    decode.push_back({{"context", c},
                      {"weighted", d.weighted()},
                      {"raw", d.total.total()},
                      {"weights", split(d.weights)},
                      {"attention", split(d.attention)},
                      {"indexer", split(d.indexer)},
                      {"operations", ops}});
  }
  j["decode_flops"] = decode;
  j["assumptions"] = m.assumptions;
  return j.dump(2) + "\n";
}

}  // namespace dsv41
