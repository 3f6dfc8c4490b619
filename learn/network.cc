#include "learn/network.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "learn/data_file_internal.h"

namespace meshtrain::learn {

std::string TensorShape::ToString() const {
  return std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

double LayerSpec::Arg(const std::string& key, size_t pos, double fallback) const {
  for (const auto& [k, v] : kwargs) {
    if (k == key) return v;
  }
  return pos < args.size() ? args[pos] : fallback;
}

std::string LayerUsage() {
  std::string out;
  for (const LayerType& t : LayerTypes()) out += (out.empty() ? "" : ", ") + std::string(t.usage);
  return out + "; last token optionally xent (default) or mse";
}

namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

const LayerType* FindType(const std::string& name) {
  for (const LayerType& t : LayerTypes()) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

// Spec text is user input: shown escaped (printable ASCII) and cut at 40 bytes.
using data_file_internal::Quote;

Status TokenError(size_t pos, const std::string& token, const std::string& what) {
  return Status::InvalidArgument("model spec: layer " + std::to_string(pos) + " " + Quote(token) +
                                 ": " + what);
}

// Splits at commas outside parentheses; fails on unbalanced parentheses.
Result<std::vector<std::string>> SplitTokens(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char ch : text) {
    if (ch == '(') ++depth;
    if (ch == ')' && --depth < 0) break;
    if (ch == ',' && depth == 0) {
      out.push_back(Trim(cur));
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (depth != 0) {
    return Status::InvalidArgument("model spec: unbalanced parentheses in " + Quote(text));
  }
  out.push_back(Trim(cur));
  return out;
}

Result<double> ParseNumber(const std::string& text) {
  const std::string t = Trim(text);
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v)) {
    return Status::InvalidArgument(Quote(t) + " is not a number");
  }
  return v;
}

Result<LayerSpec> ParseToken(size_t pos, const std::string& token) {
  LayerSpec spec;
  spec.text = token;
  const size_t open = token.find('(');
  spec.name = Trim(token.substr(0, open));
  if (spec.name.empty()) return TokenError(pos, token, "empty layer name");
  if (open != std::string::npos) {
    if (token.back() != ')') return TokenError(pos, token, "expected ')' at the end");
    const std::string inner = token.substr(open + 1, token.size() - open - 2);
    if (!Trim(inner).empty()) {
      size_t start = 0;
      while (start <= inner.size()) {
        size_t comma = inner.find(',', start);
        if (comma == std::string::npos) comma = inner.size();
        const std::string item = inner.substr(start, comma - start);
        const size_t eq = item.find('=');
        const Result<double> v = ParseNumber(eq == std::string::npos ? item : item.substr(eq + 1));
        if (!v.ok()) return TokenError(pos, token, v.status().message());
        if (eq == std::string::npos) {
          if (!spec.kwargs.empty()) {
            return TokenError(pos, token, "positional argument after key=value");
          }
          spec.args.push_back(v.value());
        } else {
          spec.kwargs.emplace_back(Trim(item.substr(0, eq)), v.value());
        }
        start = comma + 1;
      }
    }
  }
  return spec;
}

}  // namespace

Result<ModelSpec> ParseModelSpec(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f) {
      return Status::InvalidArgument("model spec: byte " + Quote(text.substr(i, 1)) +
                                     " at offset " + std::to_string(i) +
                                     " is not printable ASCII (a spec is e.g. "
                                     "\"conv(16,5),relu,flatten,dense(10)\")");
    }
  }
  Result<std::vector<std::string>> tokens = SplitTokens(text);
  if (!tokens.ok()) return tokens.status();
  ModelSpec model;
  const std::vector<std::string>& toks = tokens.value();
  for (size_t i = 0; i < toks.size(); ++i) {
    const size_t pos = i + 1;
    if (toks[i].empty()) return TokenError(pos, toks[i], "empty layer (two commas?)");
    if (i + 1 == toks.size() && (toks[i] == "xent" || toks[i] == "mse")) {
      model.loss = toks[i] == "mse" ? LossKind::kMse : LossKind::kSoftmaxCrossEntropy;
      continue;
    }
    Result<LayerSpec> spec = ParseToken(pos, toks[i]);
    if (!spec.ok()) return spec.status();
    const LayerType* type = FindType(spec.value().name);
    if (type == nullptr) {
      std::string closest;
      size_t best = 3;  // suggest only near misses
      for (const LayerType& t : LayerTypes()) {
        const size_t d = EditDistance(spec.value().name, t.name);
        if (d < best) {
          best = d;
          closest = t.name;
        }
      }
      return TokenError(pos, toks[i],
                        "unknown layer " + Quote(spec.value().name) +
                            (closest.empty() ? "" : " (did you mean " + closest + "?)") +
                            "; known: " + LayerUsage());
    }
    const size_t nargs = spec.value().args.size() + spec.value().kwargs.size();
    if (nargs < type->min_args || nargs > type->max_args) {
      return TokenError(pos, toks[i],
                        std::string("wrong number of arguments, expected ") + type->usage);
    }
    for (const auto& kv : spec.value().kwargs) {
      if (std::find(type->keywords.begin(), type->keywords.end(), kv.first) ==
          type->keywords.end()) {
        return TokenError(pos, toks[i],
                          "unknown argument " + Quote(kv.first) + ", expected " + type->usage);
      }
    }
    model.layers.push_back(std::move(spec).value());
  }
  if (model.layers.empty()) return Status::InvalidArgument("model spec: no layers");
  for (size_t i = 0; i < model.layers.size(); ++i) {
    std::string t;
    for (char ch : model.layers[i].text) {
      if (!std::isspace(static_cast<unsigned char>(ch))) t += ch;
    }
    model.text += (i ? "," : "") + t;
  }
  if (model.loss == LossKind::kMse) model.text += ",mse";
  return model;
}

// Largest per-sample activation (input or layer output) a network accepts.
constexpr double kMaxActivation = 1 << 26;

template <typename S>
Result<Network<S>> Network<S>::Build(const ModelSpec& spec, const TensorShape& input) {
  if (input.c < 1 || input.h < 1 || input.w < 1 ||
      static_cast<double>(input.c) * input.h * input.w > kMaxActivation) {
    return Status::InvalidArgument("model input " + std::to_string(input.c) + "x" +
                                   std::to_string(input.h) + "x" + std::to_string(input.w) +
                                   ": every dimension must be >= 1 and the size at most 2^26");
  }
  Network<S> net;
  net.spec_ = spec;
  net.input_ = input;
  TensorShape shape = input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& ls = spec.layers[i];
    const LayerType* type = FindType(ls.name);
    if (type == nullptr) return TokenError(i + 1, ls.text, "unknown layer");
    std::unique_ptr<Layer<S>> layer;
    if constexpr (std::is_same_v<S, float>) {
      layer = type->make_float(ls);
    } else {
      layer = type->make_double(ls);
    }
    layer->set_index(static_cast<int>(i));
    Result<TensorShape> out = layer->Configure(shape);
    if (!out.ok()) {
      return Status::InvalidArgument("model spec: layer " + std::to_string(i + 1) + " (input " +
                                     shape.ToString() + "): " + out.status().message());
    }
    shape = out.value();
    if (static_cast<double>(shape.c) * shape.h * shape.w > kMaxActivation) {
      return TokenError(i + 1, ls.text, "output too large (" + shape.ToString() + ")");
    }
    net.offsets_.push_back(net.num_params_);
    net.num_params_ += layer->NumParams();
    net.layers_.push_back(std::move(layer));
  }
  net.output_ = shape;
  if (net.num_params_ == 0) return Status::InvalidArgument("model spec: no trainable layer");
  if (net.num_params_ > (size_t{1} << 28)) {
    return Status::InvalidArgument("model spec: " + std::to_string(net.num_params_) +
                                   " parameters is more than the 2^28 supported");
  }
  return net;
}

template <typename S>
void Network<S>::Init(uint64_t seed, S* params) const {
  Rng rng(seed);
  for (size_t l = 0; l < layers_.size(); ++l) layers_[l]->Init(&rng, params + offsets_[l]);
}

template <typename S>
const Mat<S>& Network<S>::Forward(const S* params, const Mat<S>& x, Workspace<S>* ws,
                                  const RunMode& mode) const {
  ws->acts.resize(layers_.size() + 1);
  ws->caches.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Mat<S>& in = l == 0 ? x : ws->acts[l];
    layers_[l]->Forward(params + offsets_[l], in, &ws->acts[l + 1], &ws->caches[l], mode);
  }
  return ws->acts[layers_.size()];
}

template <typename S>
S Network<S>::LossAndGradient(const S* params, const Mat<S>& x, const int32_t* labels, S* grad,
                              Workspace<S>* ws, const RunMode& mode) const {
  const Mat<S>& out = Forward(params, x, ws, mode);
  const Eigen::Index batch = x.cols();
  const Eigen::Index k = out.rows();
  Mat<S>& dz = ws->d0;
  S loss = 0;
  if (spec_.loss == LossKind::kMse) {
    dz = out;
    for (Eigen::Index b = 0; b < batch; ++b) dz(labels[b], b) -= S(1);
    loss = dz.squaredNorm() / S(batch * k);
    dz *= S(2) / S(batch * k);
  } else {
    dz.resize(k, batch);
    for (Eigen::Index b = 0; b < batch; ++b) {
      const S max = out.col(b).maxCoeff();
      dz.col(b) = (out.col(b).array() - max).exp().matrix();
      const S sum = dz.col(b).sum();
      loss += max + std::log(sum) - out(labels[b], b);
      dz.col(b) /= sum;
      dz(labels[b], b) -= S(1);
    }
    loss /= S(batch);
    dz /= S(batch);
  }
  if (grad == nullptr) return loss;
  for (size_t l = layers_.size(); l-- > 0;) {
    const Mat<S>& in = l == 0 ? x : ws->acts[l];
    Mat<S>* dx = l == 0 ? nullptr : &ws->d1;
    layers_[l]->Backward(params + offsets_[l], in, ws->acts[l + 1], ws->d0, &ws->caches[l], dx,
                         grad + offsets_[l]);
    if (dx != nullptr) std::swap(ws->d0, ws->d1);
  }
  return loss;
}

template <typename S>
ClassifierSums Network<S>::Evaluate(const S* params, const Mat<S>& x, const int32_t* labels,
                                    Workspace<S>* ws) const {
  const Mat<S>& out = Forward(params, x, ws, RunMode{});
  ClassifierSums sums;
  for (Eigen::Index b = 0; b < out.cols(); ++b) {
    auto col = out.col(b);
    Eigen::Index arg = 0;
    const S max = col.maxCoeff(&arg);
    if (spec_.loss == LossKind::kMse) {
      double sq =
          static_cast<double>(col.squaredNorm()) - 2.0 * static_cast<double>(col[labels[b]]) + 1.0;
      sums.loss_sum += sq / static_cast<double>(out.rows());
    } else {
      sums.loss_sum += static_cast<double>(max) +
                       std::log(static_cast<double>((col.array() - max).exp().sum())) -
                       static_cast<double>(col[labels[b]]);
    }
    if (arg == labels[b]) ++sums.correct;
  }
  return sums;
}

template class Network<float>;
template class Network<double>;

}  // namespace meshtrain::learn
