#include "daemon/config_file.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "wire/messages.h"

namespace meshtrain::daemon {
namespace {

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// A scalar: "quoted" (no escapes beyond \" and \\), or a bare word/number.
bool Scalar(const std::string& v, std::string* out) {
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
    std::string s;
    for (size_t i = 1; i + 1 < v.size(); ++i) {
      if (v[i] == '\\' && i + 2 < v.size()) ++i;
      s.push_back(v[i]);
    }
    *out = s;
    return true;
  }
  if (v.empty() || v.find_first_of("\"[]") != std::string::npos) return false;
  *out = v;
  return true;
}

// A value becomes one argument after its "--key": one that starts with "--" would be read as
// another option (even --config, which a file must not include).
bool ValueOk(const std::string& v) { return v.rfind("--", 0) != 0; }

bool ScalarValue(const std::string& v, std::string* out) { return Scalar(v, out) && ValueOk(*out); }

}  // namespace

bool ConfigFileArgs(const std::string& path, std::vector<std::string>* args, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read config file '" + path + "'";
    return false;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    *error = "cannot read config file '" + path + "'";
    return false;
  }
  return ConfigTextArgs(text.str(), path, args, error);
}

bool ConfigTextArgs(std::string_view text, const std::string& origin,
                    std::vector<std::string>* args, std::string* error) {
  int lineno = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    std::string line(
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos));
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++lineno;
    const std::string where = origin + ":" + std::to_string(lineno) + ": ";
    // Values become names, labels and addresses that travel on the wire and into JSON: the
    // whole line must be UTF-8, and NUL (which would cut an argument short) is refused too.
    if (!wire::ValidUtf8(line) || line.find('\0') != std::string::npos) {
      *error = where + "not valid UTF-8 text";
      return false;
    }
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;
    if (line.front() == '[' && line.back() == ']') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) {
      *error = where + "expected key = value";
      return false;
    }
    std::string key = Trim(line.substr(0, eq));
    std::string value = Trim(line.substr(eq + 1));
    // A trailing comment after an unquoted value or after a closing quote/bracket.
    if (auto hash = value.find(" #"); hash != std::string::npos)
      value = Trim(value.substr(0, hash));
    std::replace(key.begin(), key.end(), '_', '-');
    if (key.empty() ||
        key.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos) {
      *error = where + "invalid key '" + key + "'";
      return false;
    }
    if (key == "config") {
      *error = where + "a config file cannot include another";
      return false;
    }
    const std::string flag = "--" + key;
    if (value == "true") {
      args->push_back(flag);
      continue;
    }
    if (value == "false") continue;
    if (value.size() >= 2 && value.front() == '[' && value.back() == ']') {
      std::string body = value.substr(1, value.size() - 2);
      size_t start = 0;
      while (start <= body.size()) {
        const auto comma = body.find(',', start);
        const std::string item = Trim(
            body.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (!item.empty()) {
          std::string s;
          if (!ScalarValue(item, &s)) {
            *error = where + "invalid list item " + item;
            return false;
          }
          args->push_back(flag);
          args->push_back(s);
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      continue;
    }
    std::string s;
    if (!ScalarValue(value, &s)) {
      *error = where + "invalid value " + value;
      return false;
    }
    args->push_back(flag);
    args->push_back(s);
  }
  return true;
}

bool ExpandAgentConfig(const std::vector<std::string>& argv, std::vector<std::string>* out,
                       std::string* error) {
  *out = argv;
  auto agent = std::find(argv.begin(), argv.end(), "agent");
  if (agent == argv.end()) return true;
  std::vector<std::string> rest(agent + 1, argv.end());
  std::string path;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == "--config") {
      if (i + 1 >= rest.size()) {
        *error = "--config needs a file";
        return false;
      }
      path = rest[i + 1];
      rest.erase(rest.begin() + static_cast<long>(i), rest.begin() + static_cast<long>(i) + 2);
      break;
    }
    if (rest[i].rfind("--config=", 0) == 0) {
      path = rest[i].substr(9);
      rest.erase(rest.begin() + static_cast<long>(i));
      break;
    }
  }
  if (path.empty()) return true;
  std::vector<std::string> from_file;
  if (!ConfigFileArgs(path, &from_file, error)) return false;
  // An option given on the command line replaces the file's value(s) for it.
  std::vector<std::string> given;
  for (const auto& a : rest) {
    if (a.rfind("--", 0) == 0) given.push_back(a.substr(0, a.find('=')));
  }
  out->assign(argv.begin(), agent + 1);
  for (size_t i = 0; i < from_file.size(); ++i) {
    const bool has_value = i + 1 < from_file.size() && from_file[i + 1].rfind("--", 0) != 0;
    if (std::find(given.begin(), given.end(), from_file[i]) == given.end()) {
      out->push_back(from_file[i]);
      if (has_value) out->push_back(from_file[i + 1]);
    }
    if (has_value) ++i;
  }
  out->insert(out->end(), rest.begin(), rest.end());
  return true;
}

}  // namespace meshtrain::daemon
