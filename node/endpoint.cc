#include "node/endpoint.h"

#include "wire/compress.h"

namespace meshtrain::node {

std::vector<Output> RouteNetwork(std::vector<Output> outputs, Endpoint& endpoint) {
  std::vector<Output> rest;
  for (auto& o : outputs) {
    if (auto* d = std::get_if<SendDatagram>(&o)) {
      if (d->via.empty()) {
        endpoint.SendDatagram(d->to, d->msg);
      } else {
        endpoint.SendRelayed(d->to, d->via, d->dest, d->msg);
      }
    } else if (auto* c = std::get_if<Connect>(&o)) {
      endpoint.Connect(c->conn, c->to);
    } else if (auto* f = std::get_if<SendFrame>(&o)) {
      endpoint.SendFrame(f->conn, f->msg);
    } else if (auto* sp = std::get_if<SendParams>(&o)) {
      endpoint.SendParams(*sp);
    } else if (auto* cl = std::get_if<Close>(&o)) {
      endpoint.Close(cl->conn, cl->abort);
    } else if (auto* p = std::get_if<ProbeLink>(&o)) {
      endpoint.ProbeLink(*p);
    } else {
      rest.push_back(std::move(o));
    }
  }
  return rest;
}

std::vector<wire::Frame> Endpoint::ParamFrames(const node::SendParams& s) {
  std::vector<wire::Frame> frames;
  if (!s.params || s.params->empty() || s.params->size() > UINT32_MAX) return frames;
  const auto total = static_cast<uint32_t>(s.params->size());
  const uint32_t chunks = wire::StreamChunks(total, s.chunk_floats, s.span);
  frames.reserve(chunks);
  for (uint32_t i = 0; i < chunks; ++i) {
    wire::Frame f;
    f.sender = s.sender;
    wire::ParamChunk c = wire::EncodeStreamChunk(s.params->data(), total, i, s.spec, s.round,
                                                 s.step, s.chunk_floats, s.span);
    if (c.view != nullptr) {  // the frame goes out as a struct: it carries its values
      c.data.assign(c.view, c.view + c.count);
      c.view = nullptr;
    }
    c.final = s.final;
    c.consensus = s.consensus;
    c.covers = s.covers;
    f.body = std::move(c);
    frames.push_back(std::move(f));
  }
  return frames;
}

void Endpoint::SendParams(const node::SendParams& s) {
  for (const wire::Frame& f : ParamFrames(s)) SendFrame(s.conn, f);
}

std::optional<Mix> WholeModels::Add(MixChunk& m) {
  Partial& p = partial_[m.from];
  if (p.params.size() != m.total || p.round != m.round) {
    p = Partial{m.round, 0, std::vector<float>(m.total, 0.0f)};
  }
  if (uint64_t{m.offset} + m.count() > p.params.size()) return std::nullopt;
  if (!m.int8()) {
    std::copy(m.values(), m.values() + m.count(), p.params.begin() + m.offset);
  } else {
    wire::DequantizeInt8Chunk(m.qvalues(), m.qscales(), m.count(), p.params.data() + m.offset);
  }
  p.covered += m.count();
  if (p.covered < p.params.size()) return std::nullopt;
  Mix mix{m.from, m.step, std::move(p.params), m.finished, false, 0};
  partial_.erase(m.from);
  return mix;
}

std::vector<Output> WholeModels::Apply(std::vector<Output> outputs) {
  std::vector<Output> out;
  out.reserve(outputs.size());
  for (auto& o : outputs) {
    if (auto* m = std::get_if<MixChunk>(&o)) {
      if (auto mix = Add(*m)) out.push_back(std::move(*mix));
    } else {
      out.push_back(std::move(o));
    }
  }
  return out;
}

}  // namespace meshtrain::node
