// distributed/slurm_hostlist.cpp — expanding Slurm host lists.
// Read before: distributed/slurm_hostlist.h.
#include "distributed/slurm_hostlist.h"

#include <cctype>
#include <cstdint>

#include "core/error.h"

namespace lockstep::distributed {

namespace {

// One bracket's contents ("01-03,7") as the strings it stands for.
std::vector<std::string> expand_set(const std::string& set, const std::string& expr, const std::string& variable,
                                    size_t max_hosts, bool first_only) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= set.size()) {
    size_t comma = set.find(',', start);
    if (comma == std::string::npos) comma = set.size();
    const std::string item = set.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    auto digits = [](const std::string& s) {
      if (s.empty() || s.size() > 18) return false;
      for (char c : s) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
      }
      return true;
    };
    LS_CHECK(digits(lo) && digits(hi), "rendezvous: ", variable, "='", expr, "': '[", set,
             "]' holds '", item, "', not a number or a range like 01-03; set MASTER_ADDR to rank 0's host instead");
    const int64_t a = std::stoll(lo), b = std::stoll(hi);
    LS_CHECK(a <= b, "rendezvous: ", variable, "='", expr, "': the range '", item, "' runs backwards");
    LS_CHECK(first_only || static_cast<uint64_t>(b - a) < max_hosts, "rendezvous: ", variable, "='", expr, "': the range '", item,
             "' has more than ", max_hosts, " hosts");
    for (int64_t v = a; v <= b; ++v) {
      std::string n = std::to_string(v);
      if (n.size() < lo.size()) n.insert(0, lo.size() - n.size(), '0');
      out.push_back(std::move(n));
      if (first_only) return out;
    }
    start = comma + 1;
  }
  return out;
}

// The host expressions of `list`: split at commas outside brackets.
std::vector<std::string> split_list(const std::string& list, const std::string& variable) {
  std::vector<std::string> exprs;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    LS_CHECK(depth == 0 || depth == 1, "rendezvous: ", variable, "='", list, "' is not a Slurm host list: ",
             depth < 0 ? "a ']' without its '['" : "nested '['");
    if (c == ',' && depth == 0) {
      exprs.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  LS_CHECK(depth == 0, "rendezvous: ", variable, "='", list, "' is not a Slurm host list: a '[' is not closed");
  exprs.push_back(cur);
  for (const auto& e : exprs) {
    LS_CHECK(!e.empty(), "rendezvous: ", variable, "='", list, "' has an empty host name (two commas, or one at an "
             "end); set MASTER_ADDR to rank 0's host instead");
  }
  return exprs;
}

// Expands one expression; with first_only, only its first host.
std::vector<std::string> expand_expr(const std::string& expr, const std::string& variable, size_t max_hosts,
                                     bool first_only) {
  std::vector<std::string> hosts = {""};
  size_t i = 0;
  while (i < expr.size()) {
    const size_t open = expr.find('[', i);
    const std::string text = expr.substr(i, open == std::string::npos ? std::string::npos : open - i);
    for (auto& h : hosts) h += text;
    if (open == std::string::npos) break;
    const size_t close = expr.find(']', open);
    std::vector<std::string> set =
        expand_set(expr.substr(open + 1, close - open - 1), expr, variable, max_hosts, first_only);
    LS_CHECK(hosts.size() * set.size() <= max_hosts, "rendezvous: ", variable, "='", expr, "' names more than ",
             max_hosts, " hosts");
    std::vector<std::string> next;
    for (const auto& h : hosts) {
      for (const auto& s : set) next.push_back(h + s);
    }
    hosts = std::move(next);
    i = close + 1;
  }
  return hosts;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list, const std::string& variable, size_t max_hosts) {
  std::vector<std::string> out;
  for (const auto& expr : split_list(list, variable)) {
    for (auto& h : expand_expr(expr, variable, max_hosts, false)) out.push_back(std::move(h));
    LS_CHECK(out.size() <= max_hosts, "rendezvous: ", variable, " names more than ", max_hosts, " hosts");
  }
  return out;
}

std::string first_host(const std::string& list, const std::string& variable) {
  return expand_expr(split_list(list, variable).front(), variable, size_t(1) << 20, true).front();
}

}  // namespace lockstep::distributed
