#include "wire/messages.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "base/loop_guard.h"

namespace meshtrain::wire {

// ---- Syntax of strings from the network ------------------------------------------------------

bool ValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Lead byte: the sequence length and the range its first continuation byte must fall in
    // (Unicode Table 3-7), which excludes overlongs, surrogates and code points > U+10FFFF.
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong below U+0800
      if (c == 0xed) hi = 0x9f;  // surrogates U+D800..U+DFFF
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;  // overlong below U+10000
      if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
    } else {
      return false;  // a continuation byte, C0/C1 (overlong ASCII), or F5..FF
    }
    if (n - i < len) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return false;
    }
    i += len;
  }
  return true;
}

bool NoControlChars(std::string_view s) {
  if (!ValidUtf8(s)) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u < 0x20 || u == 0x7f) return false;
    // U+0080..U+009F is encoded C2 80..C2 9F.
    if (u == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      return false;
    }
  }
  return true;
}

bool ValidName(std::string_view s, size_t max) {
  return !s.empty() && s.size() <= max && NoControlChars(s);
}

bool ValidAddr(std::string_view a) {
  // inet_pton accepts ASCII only, so a valid address is valid UTF-8 too; checked first anyway
  // so that the rule does not depend on the resolver library.
  if (a.size() > kMaxStringBytes || !ValidUtf8(a)) return false;
  const size_t colon = a.rfind(':');
  if (colon == std::string_view::npos) return false;
  const std::string_view port = a.substr(colon + 1);
  if (port.empty() || port.size() > 5) return false;
  uint32_t p = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
    p = p * 10 + static_cast<uint32_t>(c - '0');
  }
  if (p == 0 || p > 65535) return false;
  std::string_view host = a.substr(0, colon);
  int family = AF_INET;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    family = AF_INET6;
  }
  if (host.empty() || host.size() >= INET6_ADDRSTRLEN) return false;
  char buf[INET6_ADDRSTRLEN];
  std::memcpy(buf, host.data(), host.size());
  buf[host.size()] = '\0';
  unsigned char out[sizeof(in6_addr)];
  return inet_pton(family, buf, out) == 1;
}

bool ValidFingerprint(std::string_view f) {
  return f.size() == kFingerprintChars && std::all_of(f.begin(), f.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// ---- Public helpers -------------------------------------------------------------------------

const char* RejectName(Reject r) {
  switch (r) {
    case Reject::kTooLarge:
      return "too_large";
    case Reject::kTooSmall:
      return "too_small";
    case Reject::kAuth:
      return "auth";
    case Reject::kVerify:
      return "verify";
    case Reject::kVersion:
      return "version";
    case Reject::kCluster:
      return "cluster";
    case Reject::kSemantic:
      return "semantic";
    case Reject::kReplay:
      return "replay";
    case Reject::kRateLimited:
      return "rate_limited";
  }
  return "unknown";
}

const char* KeyOpName(KeyOpKind op) {
  switch (op) {
    case KeyOpKind::kInstall:
      return "install";
    case KeyOpKind::kUse:
      return "use";
    case KeyOpKind::kRemove:
      return "remove";
    case KeyOpKind::kList:
      return "list";
  }
  return "unknown";
}

bool ValidKeyOp(const KeyOpMsg& m) {
  switch (m.op) {
    case KeyOpKind::kInstall:
    case KeyOpKind::kUse:
    case KeyOpKind::kRemove:
      return m.key.has_value();
    case KeyOpKind::kList:
      return !m.key.has_value();
  }
  return false;  // not a known op
}

bool ValidKeyOpReply(const KeyOpReplyMsg& m) {
  if (m.error.size() > kMaxStringBytes || !NoControlChars(m.error)) return false;
  if (m.keys.size() > kMaxKeysInReply) return false;
  for (size_t i = 0; i < m.keys.size(); ++i) {
    if (!ValidFingerprint(m.keys[i])) return false;
    // Unique, so the primary flag on the wire names exactly one entry.
    for (size_t j = 0; j < i; ++j) {
      if (m.keys[j] == m.keys[i]) return false;
    }
  }
  return m.primary.empty() || std::find(m.keys.begin(), m.keys.end(), m.primary) != m.keys.end();
}

uint64_t RejectCounters::total() const {
  uint64_t sum = 0;
  for (uint64_t c : count) sum += c;
  return sum;
}

bool ValidNodeName(const std::string& name) { return ValidName(name, kMaxSenderBytes); }
bool ValidClusterLabel(const std::string& label) { return ValidName(label, kMaxClusterBytes); }
bool ValidWireAddr(const std::string& addr) { return ValidAddr(addr); }

bool ValidTags(const std::vector<std::pair<std::string, std::string>>& tags) {
  if (tags.size() > kMaxTags) return false;
  size_t total = 0;
  for (size_t i = 0; i < tags.size(); ++i) {
    const auto& [key, value] = tags[i];
    if (key.empty() || key.size() > kMaxTagKeyBytes) return false;
    for (char c : key) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '.' || c == '-';
      if (!ok) return false;
    }
    if (value.size() > kMaxTagValueBytes || !NoControlChars(value)) return false;
    if (i > 0 && !(tags[i - 1].first < key)) return false;  // sorted, unique
    total += key.size() + value.size();
  }
  return total <= kMaxTagTotalBytes;
}

// ---- Parameter chunking ---------------------------------------------------------------------

ParamChunk ParamChunkHeader(uint64_t round, uint64_t step, uint32_t i, uint32_t total,
                            uint32_t chunk_floats, uint32_t* len, uint32_t begin, uint32_t end) {
  if (end == 0 || end > total || begin >= end) {
    begin = 0;
    end = total;
  }
  ParamChunk c;
  c.round = round;
  c.step = step;
  c.chunk = i;
  c.chunks = static_cast<uint32_t>((uint64_t{end - begin} + chunk_floats - 1) / chunk_floats);
  c.total = total;
  c.offset = begin + i * chunk_floats;
  c.fragment = begin != 0 || end != total;
  *len = std::min(chunk_floats, end - c.offset);
  return c;
}

std::vector<ParamChunk> SplitParams(const std::vector<float>& params, uint64_t round, uint64_t step,
                                    uint32_t chunk_floats) {
  std::vector<ParamChunk> out;
  if (params.empty() || params.size() > UINT32_MAX) return out;
  chunk_floats = std::clamp<uint32_t>(chunk_floats, 1, kParamChunkFloats);
  const auto total = static_cast<uint32_t>(params.size());
  const uint32_t chunks =
      static_cast<uint32_t>((uint64_t{total} + chunk_floats - 1) / chunk_floats);
  out.reserve(chunks);
  for (uint32_t i = 0; i < chunks; ++i) {
    uint32_t len = 0;
    ParamChunk c = ParamChunkHeader(round, step, i, total, chunk_floats, &len);
    c.data.assign(params.begin() + c.offset, params.begin() + c.offset + len);
    out.push_back(std::move(c));
  }
  return out;
}

void ParamAssembler::Reset() {
  active_ = false;
  seen_.clear();
  spans_.clear();
  std::vector<float>().swap(params_);  // a broken-off transfer keeps no model's memory
  received_ = 0;
}

std::optional<ParamAssembler::Model> ParamAssembler::Add(const ParamChunk& c) {
  if (c.chunks == 0 || c.chunk >= c.chunks || c.total == 0 ||
      uint64_t{c.offset} + c.data.size() > c.total) {
    return std::nullopt;
  }
  // Chunks of one transfer travel in order, so chunk 0 of an older round means the sender
  // restarted and its round counter began again; any other chunk of an older round is stale.
  const bool restarted = have_round_ && c.round < round_ && c.chunk == 0;
  if (have_round_ && c.round < round_ && !restarted) return std::nullopt;
  if (!have_round_ || c.round > round_ || restarted) {
    Reset();
    have_round_ = true;
    active_ = true;
    round_ = c.round;
    step_ = c.step;
    base_ = c.base;
    keyed_ = false;
    final_ = false;
    consensus_ = false;
    covers_ = 0;
    chunks_ = c.chunks;
    total_ = c.total;
    seen_.assign(chunks_, false);
    // Reserved, not filled: the model's pages are written chunk by chunk as they arrive, so no
    // callback on the receiving thread (the event loop) passes over the whole model.
    params_.reserve(total_);
  }
  if (!active_ || c.chunks != chunks_ || c.total != total_ || c.step != step_ || c.base != base_ ||
      seen_[c.chunk]) {
    return std::nullopt;
  }
  seen_[c.chunk] = true;
  keyed_ = keyed_ || c.base != 0 || c.keyed;
  final_ = final_ || c.final;
  consensus_ = consensus_ || c.consensus;
  covers_ = std::max(covers_, c.covers);
  ++received_;
  const size_t end = c.offset + c.data.size();
  if (end > params_.size()) {
    // In order (the usual case) this grows by the chunk itself; a chunk ahead of a gap
    // zero-fills the gap, which the missing chunks then overwrite.
    LoopGuard::Note(end - params_.size());
    params_.resize(end);
  }
  std::copy(c.data.begin(), c.data.end(), params_.begin() + c.offset);
  spans_.emplace_back(c.offset, static_cast<uint32_t>(c.data.size()));
  if (received_ < chunks_) return std::nullopt;
  // Every chunk arrived. Their slices must tile the model exactly; otherwise a gap would be
  // silently zero, so the round is dropped instead.
  std::sort(spans_.begin(), spans_.end());
  uint64_t next = 0;
  bool tiled = true;
  for (const auto& [offset, len] : spans_) {
    tiled = tiled && offset == next;
    next = uint64_t{offset} + len;
  }
  tiled = tiled && next == total_;
  Model m{round_, step_, base_, keyed_, std::move(params_), final_, consensus_, covers_};
  Reset();  // the round stays recorded so its late duplicates are ignored
  if (!tiled) return std::nullopt;
  return m;
}

}  // namespace meshtrain::wire
