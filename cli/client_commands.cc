// The clients of a running agent (join, leave, force-leave, members, status, keys, monitor,
// export): each builds one RPC request (daemon/ops/rpc.h), prints the reply, and exits 0, 2 for a
// usage error found before calling, or 1 when the agent cannot be reached, refuses, or answers
// with something malformed (cli/exit_codes.h).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/option_choice.h"
#include "cli/rpc_client.h"
#include "daemon/ops/json_text.h"
#include "daemon/ops/log_format.h"
#include "learn/model_file.h"
#include "wire/crypto.h"
#include "wire/messages.h"

namespace meshtrain::cli {
namespace {

using nlohmann::json;

// Where every client finds the agent (shared by the subcommands; one of them runs).
struct RpcOptions {
  std::string addr = "127.0.0.1:7951";
  std::string token;  // --rpc-token / MESHTRAIN_RPC_TOKEN, sent with every request
};

RpcOptions& Rpc() {
  static RpcOptions rpc;
  return rpc;
}

void AddRpcOptions(CLI::App* sub) {
  sub->add_option("--rpc", Rpc().addr, "Agent RPC address")
      ->envname("MESHTRAIN_RPC_ADDR")
      ->capture_default_str();
  sub->add_option("--rpc-token", Rpc().token, "RPC token, when the agent requires one")
      ->envname("MESHTRAIN_RPC_TOKEN");
}

// Calls the agent and returns the reply, or prints a one-line error and returns nullopt (the
// caller exits kExitRuntime).
std::optional<json> Call(json req) {
  if (!Rpc().token.empty()) req["token"] = Rpc().token;
  auto r = CallAgent(Rpc().addr, req);
  if (!r.ok) {
    RuntimeError(r.error);
    return std::nullopt;
  }
  if (!r.reply.value("ok", false)) {
    RuntimeError(r.reply.value("error", std::string("the agent refused the request")));
    return std::nullopt;
  }
  r.reply.erase("ok");
  return r.reply;
}

// A client subcommand with the --rpc options; `run` is wrapped so that a reply field of an
// unexpected type (replies come from the network) ends in a one-line error, not in an uncaught
// json exception.
Command Client(CLI::App* sub, std::function<int()> run) {
  AddRpcOptions(sub);
  return {sub, [run = std::move(run)] {
            try {
              return run();
            } catch (const json::exception& e) {
              return RuntimeError(std::string("malformed reply from the agent: ") + e.what());
            }
          }};
}

std::string Cell(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "-";
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3f", v.get<double>());
    return buf;
  }
  return daemon::JsonText(v);
}

// Aligned columns, the header upper-cased.
void PrintRows(const std::vector<std::string>& cols, const std::vector<json>& rows) {
  std::vector<size_t> width(cols.size());
  for (size_t i = 0; i < cols.size(); ++i) width[i] = cols[i].size();
  std::vector<std::vector<std::string>> cells;
  for (const auto& r : rows) {
    std::vector<std::string> line;
    for (size_t i = 0; i < cols.size(); ++i) {
      line.push_back(Cell(r.contains(cols[i]) ? r[cols[i]] : json()));
      width[i] = std::max(width[i], line.back().size());
    }
    cells.push_back(std::move(line));
  }
  auto print_line = [&](const std::vector<std::string>& line) {
    std::string out;
    for (size_t i = 0; i < line.size(); ++i) {
      std::string cell = line[i];
      if (i + 1 < line.size()) cell.resize(width[i] + 2, ' ');
      out += cell;
    }
    std::printf("%s\n", out.c_str());
  };
  std::vector<std::string> header;
  for (const auto& c : cols) {
    std::string h = c;
    std::transform(h.begin(), h.end(), h.begin(), ::toupper);
    header.push_back(h);
  }
  print_line(header);
  for (const auto& line : cells) print_line(line);
}

}  // namespace

Command AddJoinCommand(CLI::App& app) {
  static std::vector<std::string> addrs;
  CLI::App* sub = app.add_subcommand("join", "Ask the local agent to join peers");
  sub->add_option("ADDR", addrs, "Peer addresses (HOST:PORT, IP:PORT or [IPv6]:PORT)")->required();
  return Client(sub, [] {
    for (const auto& a : addrs) {
      if (!wire::ValidUtf8(a)) return UsageError("join: an address is not valid UTF-8");
    }
    auto r = Call({{"cmd", "join"}, {"addrs", addrs}});
    if (!r) return kExitRuntime;
    std::printf("Successfully joined cluster by contacting %d nodes.\n", r->value("joined", 0));
    return kExitOk;
  });
}

Command AddLeaveCommand(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("leave", "Graceful leave; the agent then exits");
  return Client(sub, [] {
    if (!Call({{"cmd", "leave"}})) return kExitRuntime;
    std::printf("Graceful leave started; the agent exits once the news has spread.\n");
    return kExitOk;
  });
}

Command AddForceLeaveCommand(CLI::App& app) {
  static std::string name;
  CLI::App* sub = app.add_subcommand("force-leave", "Mark a failed member as left");
  sub->add_option("NAME", name, "Member name")->required();
  return Client(sub, [] {
    if (!wire::ValidUtf8(name))
      return UsageError("force-leave: the member name is not valid UTF-8");
    if (!Call({{"cmd", "force-leave"}, {"name", name}})) return kExitRuntime;
    std::printf("Member %s marked as left.\n", name.c_str());
    return kExitOk;
  });
}

struct MembersArgs {
  OutputFormat format = OutputFormat::kTable;
  std::string status_re;
  std::vector<std::string> tag_filters;
};

// The members `members` shows: those whose status matches --status and whose tags match every
// --tag KEY=REGEX.
static json FilterMembers(const json& members, const std::optional<std::regex>& status,
                          const std::vector<std::pair<std::string, std::regex>>& tags) {
  json list = json::array();
  for (const auto& m : members) {
    if (status && !std::regex_search(m.value("status", ""), *status)) continue;
    const json have = m.value("tags", json::object());
    bool all = true;
    for (const auto& [key, re] : tags) {
      const auto it = have.find(key);
      all = all && it != have.end() && it->is_string() &&
            std::regex_match(it->get<std::string>(), re);
    }
    if (all) list.push_back(m);
  }
  return list;
}

static int RunMembers(const MembersArgs& a) {
  std::optional<std::regex> status;
  if (!a.status_re.empty()) {
    try {
      status.emplace(a.status_re);
    } catch (const std::regex_error& e) {
      return UsageError("invalid --status regex '" + a.status_re + "': " + e.what());
    }
  }
  std::vector<std::pair<std::string, std::regex>> tags;
  for (const std::string& f : a.tag_filters) {
    const size_t eq = f.find('=');
    if (eq == std::string::npos || eq == 0) {
      return UsageError("invalid --tag filter '" + f + "': expected KEY=REGEX");
    }
    try {
      tags.emplace_back(f.substr(0, eq), std::regex(f.substr(eq + 1)));
    } catch (const std::regex_error& e) {
      return UsageError("invalid --tag regex '" + f.substr(eq + 1) + "': " + e.what());
    }
  }
  auto r = Call({{"cmd", "members"}});
  if (!r) return kExitRuntime;
  const json list = FilterMembers((*r)["members"], status, tags);
  if (a.format == OutputFormat::kJson) {
    std::printf("%s\n", daemon::JsonText(json{{"members", list}}).c_str());
    return kExitOk;
  }
  std::vector<json> rows(list.begin(), list.end());
  for (json& row : rows) {  // tags as one "k=v,k2=v2" cell
    std::string cell;
    const json row_tags = row.value("tags", json::object());
    for (const auto& [k, v] : row_tags.items()) {
      cell += (cell.empty() ? "" : ",") + k + "=" + (v.is_string() ? v.get<std::string>() : "");
    }
    row["tags"] = cell;
  }
  std::vector<std::string> cols = {"name",  "addr",     "status",      "incarnation",
                                   "step",  "training", "uplink_mbps", "downlink_mbps",
                                   "reach", "path",     "relay",       "tags"};
  // With --robust on: whether robust mixing flags (and quarantines) the member.
  if (!rows.empty() && rows.front().contains("flagged")) cols.push_back("flagged");
  PrintRows(cols, rows);
  return kExitOk;
}

Command AddMembersCommand(CLI::App& app) {
  static MembersArgs a;
  CLI::App* sub = app.add_subcommand("members", "List the members this agent knows");
  AddChoice(sub, "--format", a.format, kOutputFormatNames, "Output format");
  sub->add_option("--status", a.status_re, "Only members whose status matches this regex");
  sub->add_option("--tag", a.tag_filters,
                  "KEY=REGEX: only members with tag KEY whose value matches REGEX (whole "
                  "value; repeatable, all must match)");
  return Client(sub, [] { return RunMembers(a); });
}

Command AddStatusCommand(CLI::App& app) {
  static OutputFormat format = OutputFormat::kTable;
  CLI::App* sub = app.add_subcommand("status", "This agent: step, loss, accuracy, peers, traffic");
  AddChoice(sub, "--format", format, kOutputFormatNames, "Output format");
  return Client(sub, [] {
    auto r = Call({{"cmd", "status"}});
    if (!r) return kExitRuntime;
    if (format == OutputFormat::kJson) {
      std::printf("%s\n", daemon::JsonText(*r).c_str());
    } else {
      for (auto& [k, v] : r->items()) std::printf("%-17s %s\n", (k + ":").c_str(), Cell(v).c_str());
    }
    return kExitOk;
  });
}

struct KeysArgs {
  std::string install, use, remove;
  bool list = false;
};

static int RunKeys(const KeysArgs& a) {
  if (a.install.empty() && a.use.empty() && a.remove.empty() && !a.list) {
    return UsageError("keys: give one of --install KEY, --use KEY, --remove KEY or --list");
  }
  json req = {{"cmd", "keys"}};
  if (!a.install.empty()) req.update({{"op", "install"}, {"key", a.install}});
  if (!a.use.empty()) req.update({{"op", "use"}, {"key", a.use}});
  if (!a.remove.empty()) req.update({{"op", "remove"}, {"key", a.remove}});
  if (a.list) req["op"] = "list";
  auto r = Call(req);
  if (!r) return kExitRuntime;
  std::printf("%d nodes answered.\n", r->value("nodes", 0));
  for (auto& [fp, n] : (*r)["keys"].items()) {
    const int primary = (*r)["primary"].value(fp, 0);
    std::printf("  %s  installed on %s nodes%s\n", fp.c_str(), daemon::JsonText(n).c_str(),
                primary ? (", primary on " + std::to_string(primary)).c_str() : "");
  }
  return kExitOk;
}

Command AddKeysCommand(CLI::App& app) {
  static KeysArgs a;
  CLI::App* sub = app.add_subcommand("keys", "Rotate the cluster key across the mesh");
  auto* ki = sub->add_option("--install", a.install, "Install a new key on every member");
  auto* ku = sub->add_option("--use", a.use, "Make an installed key the primary everywhere");
  auto* kr = sub->add_option("--remove", a.remove, "Remove a (non-primary) key everywhere");
  auto* kl = sub->add_flag("--list", a.list, "List key fingerprints and how many nodes hold them");
  ki->excludes(ku)->excludes(kr)->excludes(kl);
  ku->excludes(kr)->excludes(kl);
  kr->excludes(kl);
  return Client(sub, [] { return RunKeys(a); });
}

static int RunMonitor(spdlog::level::level_enum level) {
  json req = {{"cmd", "monitor"},
              {"level", std::string(daemon::NameOf(daemon::kMonitorLevelNames, level))}};
  if (!Rpc().token.empty()) req["token"] = Rpc().token;
  bool first = true;
  std::string refused;
  const std::string error = StreamAgent(Rpc().addr, req, 30000, [&first, &refused](json frame) {
    if (first) {
      first = false;
      if (!frame.value("ok", false)) {
        refused = frame.value("error", std::string("the agent refused the request"));
        return false;
      }
      return true;
    }
    if (frame.contains("log") && frame["log"].is_string()) {
      std::printf("%s\n", frame["log"].get<std::string>().c_str());
      std::fflush(stdout);
    }
    return true;
  });
  if (!refused.empty()) return RuntimeError(refused);
  if (!error.empty()) return RuntimeError(error);
  std::fprintf(stderr, "the agent closed the stream (it left or stopped)\n");
  return kExitOk;
}

Command AddMonitorCommand(CLI::App& app) {
  static spdlog::level::level_enum level = spdlog::level::info;
  CLI::App* sub = app.add_subcommand(
      "monitor",
      "Stream the agent's log lines at a level (even below its own --log-level), "
      "until Ctrl-C");
  AddChoice(sub, "--log-level", level, daemon::kMonitorLevelNames, "Log level");
  return Client(sub, [] { return RunMonitor(level); });
}

// `meshtrain export`: the agent's newest snapshot, written as a model file.
static int RunExport(const std::string& out) {
  auto r = Call({{"cmd", "export"}});
  if (!r) return kExitRuntime;
  learn::ModelFile m;
  m.spec = r->value("spec", std::string());
  m.step = r->value("step", int64_t{0});
  const json shape = r->value("input_shape", json::array());
  const json transform = r->value("input_transform", json::array({0.0, 1.0}));
  auto bytes = wire::Base64ToBytes(r->value("params", std::string()));
  if (!shape.is_array() || shape.size() != 3 || !transform.is_array() || transform.size() != 2 ||
      !bytes || bytes->size() % sizeof(float) != 0) {
    return RuntimeError("the agent's export reply is malformed");
  }
  for (int i = 0; i < 3; ++i) m.input_shape[static_cast<size_t>(i)] = shape[i].get<int>();
  m.input_shift = transform[0].get<float>();
  m.input_scale = transform[1].get<float>();
  m.params.resize(bytes->size() / sizeof(float));
  if (!m.params.empty()) std::memcpy(m.params.data(), bytes->data(), bytes->size());
  if (auto st = learn::WriteModelFile(out, m); !st.ok()) return RuntimeError(st.message());
  // Read back: the file must load as a model (the spec builds and fits the parameters).
  if (auto back = learn::ReadModelFile(out); !back.ok()) {
    return RuntimeError(back.status().message());
  }
  std::printf("exported %s: %zu parameters at step %lld\n", out.c_str(), m.params.size(),
              static_cast<long long>(m.step));
  return kExitOk;
}

Command AddExportCommand(CLI::App& app) {
  static std::string out;
  CLI::App* sub = app.add_subcommand(
      "export", "Write the agent's current model (parameters + layer spec) to an .npz file");
  sub->add_option("--out", out, "Output file (.npz)")->required();
  return Client(sub, [] { return RunExport(out); });
}

}  // namespace meshtrain::cli
