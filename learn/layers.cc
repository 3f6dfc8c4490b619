// The layer types of learn/network.h and their table. Adding a layer: one class template here and
// one row in LayerTypes().
#include <algorithm>
#include <cmath>
#include <cstring>

#include "learn/network.h"

namespace meshtrain::learn {
namespace {

template <typename S>
using MapM = Eigen::Map<Mat<S>>;
template <typename S>
using CMapM = Eigen::Map<const Mat<S>>;
template <typename S>
using CMapV = Eigen::Map<const Vec<S>>;

// Integer argument in [lo, hi]; the error names the layer token.
Result<int> IntArg(const LayerSpec& s, const std::string& key, size_t pos, double fallback, int lo,
                   int hi) {
  const double v = s.Arg(key, pos, fallback);
  if (!(v >= lo && v <= hi) || v != std::floor(v)) {
    return Status::InvalidArgument("layer " + s.text + ": " + key + " must be an integer in [" +
                                   std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                                   std::to_string(v));
  }
  return static_cast<int>(v);
}

template <typename S>
void HeNormal(Rng* rng, int fan_in, size_t n, S* w) {
  const double stddev = std::sqrt(2.0 / fan_in);
  for (size_t i = 0; i < n; ++i) w[i] = static_cast<S>(static_cast<float>(rng->Normal() * stddev));
}

// dense(N): y = W x + b, W (N x in) column-major then b (N). Any input shape (flattened).
template <typename S>
class Dense final : public Layer<S> {
 public:
  explicit Dense(const LayerSpec& s) : spec_(s) {}
  Result<TensorShape> Configure(const TensorShape& in) override {
    Result<int> n = IntArg(spec_, "units", 0, 0, 1, 1 << 20);
    if (!n.ok()) return n.status();
    in_ = in.size();
    out_ = n.value();
    return TensorShape{out_, 1, 1};
  }
  size_t NumParams() const override { return static_cast<size_t>(out_) * (in_ + 1); }
  void Init(Rng* rng, S* p) const override {
    HeNormal(rng, in_, static_cast<size_t>(out_) * in_, p);
    std::fill(p + static_cast<size_t>(out_) * in_, p + NumParams(), S(0));
  }
  void Forward(const S* p, const Mat<S>& x, Mat<S>* y, LayerCache<S>*,
               const RunMode&) const override {
    y->resize(out_, x.cols());
    y->noalias() = CMapM<S>(p, out_, in_) * x;
    y->colwise() += CMapV<S>(p + static_cast<size_t>(out_) * in_, out_);
  }
  void Backward(const S* p, const Mat<S>& x, const Mat<S>&, const Mat<S>& dy, LayerCache<S>*,
                Mat<S>* dx, S* dp) const override {
    MapM<S>(dp, out_, in_).noalias() = dy * x.transpose();
    Eigen::Map<Vec<S>>(dp + static_cast<size_t>(out_) * in_, out_) = dy.rowwise().sum();
    if (dx != nullptr) {
      dx->resize(in_, dy.cols());
      dx->noalias() = CMapM<S>(p, out_, in_).transpose() * dy;
    }
  }

 private:
  LayerSpec spec_;
  int in_ = 0;
  int out_ = 0;
};

// conv(F,K[,stride=1,pad=0]): F filters of K x K over all input channels, zero padding. Im2col
// with the patch matrix stored transposed, P (positions) * B rows x C*K*K columns, so that its
// columns are filled and read contiguously; W is F x C*K*K, then b (F).
template <typename S>
class Conv2d final : public Layer<S> {
 public:
  explicit Conv2d(const LayerSpec& s) : spec_(s) {}
  Result<TensorShape> Configure(const TensorShape& in) override {
    Result<int> f = IntArg(spec_, "filters", 0, 0, 1, 4096);
    Result<int> k = IntArg(spec_, "kernel", 1, 0, 1, 64);
    Result<int> st = IntArg(spec_, "stride", 2, 1, 1, 64);
    Result<int> pad = IntArg(spec_, "pad", 3, 0, 0, 64);
    for (const auto* r : {&f, &k, &st, &pad}) {
      if (!r->ok()) return r->status();
    }
    in_ = in;
    filters_ = f.value();
    k_ = k.value();
    stride_ = st.value();
    pad_ = pad.value();
    if (in.h + 2 * pad_ < k_ || in.w + 2 * pad_ < k_) {
      return Status::InvalidArgument("layer " + spec_.text + ": kernel " + std::to_string(k_) +
                                     " is larger than its (padded) input " + in.ToString());
    }
    out_ = TensorShape{filters_, (in.h + 2 * pad_ - k_) / stride_ + 1,
                       (in.w + 2 * pad_ - k_) / stride_ + 1};
    return out_;
  }
  size_t NumParams() const override { return static_cast<size_t>(filters_) * (patch() + 1); }
  void Init(Rng* rng, S* p) const override {
    HeNormal(rng, patch(), static_cast<size_t>(filters_) * patch(), p);
    std::fill(p + static_cast<size_t>(filters_) * patch(), p + NumParams(), S(0));
  }
  void Forward(const S* p, const Mat<S>& x, Mat<S>* y, LayerCache<S>* c,
               const RunMode&) const override {
    const Eigen::Index batch = x.cols();
    const Eigen::Index positions = out_.h * out_.w;
    Im2Col(x, &c->m);
    Mat<S> yt(positions * batch, filters_);  // (b, position) x filter
    yt.noalias() = c->m * CMapM<S>(p, filters_, patch()).transpose();
    yt.rowwise() += CMapV<S>(p + static_cast<size_t>(filters_) * patch(), filters_).transpose();
    y->resize(out_.size(), batch);
    for (Eigen::Index b = 0; b < batch; ++b) {
      for (int f = 0; f < filters_; ++f) {
        y->col(b).segment(f * positions, positions) = yt.col(f).segment(b * positions, positions);
      }
    }
  }
  void Backward(const S* p, const Mat<S>&, const Mat<S>&, const Mat<S>& dy, LayerCache<S>* c,
                Mat<S>* dx, S* dp) const override {
    const Eigen::Index batch = dy.cols();
    const Eigen::Index positions = out_.h * out_.w;
    Mat<S> dyt(positions * batch, filters_);
    for (Eigen::Index b = 0; b < batch; ++b) {
      for (int f = 0; f < filters_; ++f) {
        dyt.col(f).segment(b * positions, positions) = dy.col(b).segment(f * positions, positions);
      }
    }
    MapM<S>(dp, filters_, patch()).noalias() = dyt.transpose() * c->m;
    Eigen::Map<Vec<S>>(dp + static_cast<size_t>(filters_) * patch(), filters_) =
        dyt.colwise().sum().transpose();
    if (dx == nullptr) return;
    Mat<S> dcols(positions * batch, patch());
    dcols.noalias() = dyt * CMapM<S>(p, filters_, patch());
    Col2Im(dcols, batch, dx);
  }

 private:
  int patch() const { return in_.c * k_ * k_; }

  // Visits every (patch column r, row offset, input index or -1 for padding).
  template <typename Fn>
  void ForEachTap(Eigen::Index batch, Fn fn) const {
    const Eigen::Index positions = out_.h * out_.w;
    const Eigen::Index rows = positions * batch;
    for (int ch = 0; ch < in_.c; ++ch) {
      for (int ki = 0; ki < k_; ++ki) {
        for (int kj = 0; kj < k_; ++kj) {
          const Eigen::Index r = (static_cast<Eigen::Index>(ch) * k_ + ki) * k_ + kj;
          for (Eigen::Index b = 0; b < batch; ++b) {
            const Eigen::Index in_base =
                b * in_.size() + static_cast<Eigen::Index>(ch) * in_.h * in_.w;
            Eigen::Index row = r * rows + b * positions;
            for (int oh = 0; oh < out_.h; ++oh) {
              const int ih = oh * stride_ - pad_ + ki;
              for (int ow = 0; ow < out_.w; ++ow, ++row) {
                const int iw = ow * stride_ - pad_ + kj;
                const bool inside = ih >= 0 && ih < in_.h && iw >= 0 && iw < in_.w;
                fn(row, inside ? in_base + static_cast<Eigen::Index>(ih) * in_.w + iw : -1);
              }
            }
          }
        }
      }
    }
  }
  void Im2Col(const Mat<S>& x, Mat<S>* cols) const {
    const Eigen::Index batch = x.cols();
    cols->resize(static_cast<Eigen::Index>(out_.h) * out_.w * batch, patch());
    S* dst = cols->data();
    const S* src = x.data();
    ForEachTap(batch,
               [&](Eigen::Index row, Eigen::Index in) { dst[row] = in < 0 ? S(0) : src[in]; });
  }
  void Col2Im(const Mat<S>& dcols, Eigen::Index batch, Mat<S>* dx) const {
    dx->setZero(in_.size(), batch);
    S* dst = dx->data();
    const S* src = dcols.data();
    ForEachTap(batch, [&](Eigen::Index row, Eigen::Index in) {
      if (in >= 0) dst[in] += src[row];
    });
  }

  LayerSpec spec_;
  TensorShape in_;
  TensorShape out_;
  int filters_ = 0, k_ = 0, stride_ = 1, pad_ = 0;
};

// maxpool(K[,stride=K]) and avgpool(K[,stride=K]): per channel, no padding.
template <typename S, bool kMax>
class Pool final : public Layer<S> {
 public:
  explicit Pool(const LayerSpec& s) : spec_(s) {}
  Result<TensorShape> Configure(const TensorShape& in) override {
    Result<int> k = IntArg(spec_, "size", 0, 0, 1, 64);
    if (!k.ok()) return k.status();
    Result<int> st = IntArg(spec_, "stride", 1, k.value(), 1, 64);
    if (!st.ok()) return st.status();
    k_ = k.value();
    stride_ = st.value();
    if (in.h < k_ || in.w < k_) {
      return Status::InvalidArgument("layer " + spec_.text + ": window " + std::to_string(k_) +
                                     " is larger than its input " + in.ToString());
    }
    in_ = in;
    out_ = TensorShape{in.c, (in.h - k_) / stride_ + 1, (in.w - k_) / stride_ + 1};
    return out_;
  }
  void Forward(const S*, const Mat<S>& x, Mat<S>* y, LayerCache<S>* c,
               const RunMode&) const override {
    const Eigen::Index batch = x.cols();
    y->resize(out_.size(), batch);
    if (kMax) c->idx.resize(static_cast<size_t>(out_.size()) * batch);
    const S inv = S(1) / S(k_ * k_);
    for (Eigen::Index b = 0; b < batch; ++b) {
      const S* in = x.col(b).data();
      S* out = y->col(b).data();
      int32_t* arg = kMax ? c->idx.data() + b * out_.size() : nullptr;
      for (int ch = 0; ch < in_.c; ++ch) {
        for (int oh = 0; oh < out_.h; ++oh) {
          for (int ow = 0; ow < out_.w; ++ow) {
            const int o = (ch * out_.h + oh) * out_.w + ow;
            int best = -1;
            S acc = S(0);
            for (int ki = 0; ki < k_; ++ki) {
              for (int kj = 0; kj < k_; ++kj) {
                const int i = (ch * in_.h + oh * stride_ + ki) * in_.w + ow * stride_ + kj;
                if (kMax) {
                  if (best < 0 || in[i] > acc) {
                    acc = in[i];
                    best = i;
                  }
                } else {
                  acc += in[i];
                }
              }
            }
            out[o] = kMax ? acc : acc * inv;
            if (kMax) arg[o] = best;
          }
        }
      }
    }
  }
  void Backward(const S*, const Mat<S>&, const Mat<S>&, const Mat<S>& dy, LayerCache<S>* c,
                Mat<S>* dx, S*) const override {
    if (dx == nullptr) return;
    const Eigen::Index batch = dy.cols();
    dx->setZero(in_.size(), batch);
    const S inv = S(1) / S(k_ * k_);
    for (Eigen::Index b = 0; b < batch; ++b) {
      const S* g = dy.col(b).data();
      S* d = dx->col(b).data();
      if (kMax) {
        const int32_t* arg = c->idx.data() + b * out_.size();
        for (int o = 0; o < out_.size(); ++o) d[arg[o]] += g[o];
        continue;
      }
      for (int ch = 0; ch < in_.c; ++ch) {
        for (int oh = 0; oh < out_.h; ++oh) {
          for (int ow = 0; ow < out_.w; ++ow) {
            const S share = g[(ch * out_.h + oh) * out_.w + ow] * inv;
            for (int ki = 0; ki < k_; ++ki) {
              for (int kj = 0; kj < k_; ++kj) {
                d[(ch * in_.h + oh * stride_ + ki) * in_.w + ow * stride_ + kj] += share;
              }
            }
          }
        }
      }
    }
  }

 private:
  LayerSpec spec_;
  TensorShape in_;
  TensorShape out_;
  int k_ = 1, stride_ = 1;
};
template <typename S>
using MaxPool = Pool<S, true>;
template <typename S>
using AvgPool = Pool<S, false>;

// relu, tanh, sigmoid: elementwise; the derivative is computed from the output.
enum class Act { kRelu, kTanh, kSigmoid };
template <typename S, Act kAct>
class Activation final : public Layer<S> {
 public:
  explicit Activation(const LayerSpec&) {}
  Result<TensorShape> Configure(const TensorShape& in) override { return in; }
  void Forward(const S*, const Mat<S>& x, Mat<S>* y, LayerCache<S>*,
               const RunMode&) const override {
    if (kAct == Act::kRelu) {
      *y = x.cwiseMax(S(0));
    } else if (kAct == Act::kTanh) {
      *y = x.array().tanh().matrix();
    } else {
      *y = (S(1) / (S(1) + (-x.array()).exp())).matrix();
    }
  }
  void Backward(const S*, const Mat<S>&, const Mat<S>& y, const Mat<S>& dy, LayerCache<S>*,
                Mat<S>* dx, S*) const override {
    if (dx == nullptr) return;
    if (kAct == Act::kRelu) {
      *dx = (y.array() > S(0)).select(dy.array(), S(0)).matrix();
    } else if (kAct == Act::kTanh) {
      *dx = (dy.array() * (S(1) - y.array().square())).matrix();
    } else {
      *dx = (dy.array() * y.array() * (S(1) - y.array())).matrix();
    }
  }
};
template <typename S>
using Relu = Activation<S, Act::kRelu>;
template <typename S>
using Tanh = Activation<S, Act::kTanh>;
template <typename S>
using Sigmoid = Activation<S, Act::kSigmoid>;

// flatten: (C,H,W) -> (C*H*W,1,1); the data are unchanged.
template <typename S>
class Flatten final : public Layer<S> {
 public:
  explicit Flatten(const LayerSpec&) {}
  Result<TensorShape> Configure(const TensorShape& in) override {
    return TensorShape{in.size(), 1, 1};
  }
  void Forward(const S*, const Mat<S>& x, Mat<S>* y, LayerCache<S>*,
               const RunMode&) const override {
    *y = x;
  }
  void Backward(const S*, const Mat<S>&, const Mat<S>&, const Mat<S>& dy, LayerCache<S>*,
                Mat<S>* dx, S*) const override {
    if (dx != nullptr) *dx = dy;
  }
};

// dropout(P): in training, each value is zeroed with probability P and the rest scaled by
// 1/(1-P) (inverted dropout); identity at inference. Masks come from RunMode.seed and the layer's
// index, so a step is reproducible.
template <typename S>
class Dropout final : public Layer<S> {
 public:
  explicit Dropout(const LayerSpec& s) : spec_(s) {}
  Result<TensorShape> Configure(const TensorShape& in) override {
    p_ = spec_.Arg("p", 0, 0.5);
    if (!(p_ >= 0.0 && p_ < 1.0)) {
      return Status::InvalidArgument("layer " + spec_.text + ": p must be in [0, 1)");
    }
    return in;
  }
  void Forward(const S*, const Mat<S>& x, Mat<S>* y, LayerCache<S>* c,
               const RunMode& mode) const override {
    if (!mode.training || p_ == 0.0) {
      *y = x;
      c->m.resize(0, 0);
      return;
    }
    Rng rng(mode.seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(this->index() + 1)));
    c->m.resize(x.rows(), x.cols());
    const S keep = S(1.0 / (1.0 - p_));
    for (Eigen::Index i = 0; i < c->m.size(); ++i) {
      c->m.data()[i] = rng.Uniform() < p_ ? S(0) : keep;
    }
    *y = x.cwiseProduct(c->m);
  }
  void Backward(const S*, const Mat<S>&, const Mat<S>&, const Mat<S>& dy, LayerCache<S>* c,
                Mat<S>* dx, S*) const override {
    if (dx == nullptr) return;
    *dx = c->m.size() == 0 ? dy : dy.cwiseProduct(c->m);
  }

 private:
  LayerSpec spec_;
  double p_ = 0.5;
};

// layernorm: per sample, normalizes all C*H*W values to zero mean and unit variance (eps 1e-5),
// then y = gamma * xhat + beta with per-value gamma (init 1) and beta (init 0).
template <typename S>
class LayerNorm final : public Layer<S> {
 public:
  explicit LayerNorm(const LayerSpec&) {}
  Result<TensorShape> Configure(const TensorShape& in) override {
    d_ = in.size();
    return in;
  }
  size_t NumParams() const override { return 2 * static_cast<size_t>(d_); }
  void Init(Rng*, S* p) const override {
    std::fill(p, p + d_, S(1));
    std::fill(p + d_, p + 2 * d_, S(0));
  }
  void Forward(const S* p, const Mat<S>& x, Mat<S>* y, LayerCache<S>* c,
               const RunMode&) const override {
    const Eigen::Index batch = x.cols();
    c->m.resize(d_, batch);
    c->v.resize(batch);
    for (Eigen::Index b = 0; b < batch; ++b) {
      const S mean = x.col(b).mean();
      const S var = (x.col(b).array() - mean).square().mean();
      c->v[b] = S(1) / std::sqrt(var + S(1e-5));
      c->m.col(b) = (x.col(b).array() - mean) * c->v[b];
    }
    *y = (c->m.array().colwise() * CMapV<S>(p, d_).array()).matrix();
    y->colwise() += CMapV<S>(p + d_, d_);
  }
  void Backward(const S* p, const Mat<S>&, const Mat<S>&, const Mat<S>& dy, LayerCache<S>* c,
                Mat<S>* dx, S* dp) const override {
    Eigen::Map<Vec<S>>(dp, d_) = dy.cwiseProduct(c->m).rowwise().sum();
    Eigen::Map<Vec<S>>(dp + d_, d_) = dy.rowwise().sum();
    if (dx == nullptr) return;
    const Eigen::Index batch = dy.cols();
    dx->resize(d_, batch);
    for (Eigen::Index b = 0; b < batch; ++b) {
      const Vec<S> g = dy.col(b).cwiseProduct(CMapV<S>(p, d_));
      const S mean_g = g.mean();
      const S mean_gx = g.dot(c->m.col(b)) / S(d_);
      dx->col(b) = ((g.array() - mean_g - c->m.col(b).array() * mean_gx) * c->v[b]).matrix();
    }
  }

 private:
  int d_ = 0;
};

template <template <typename> class L>
LayerType Row(const char* name, const char* usage, size_t min_args, size_t max_args,
              std::vector<std::string> keywords) {
  return LayerType{name,
                   usage,
                   min_args,
                   max_args,
                   std::move(keywords),
                   [](const LayerSpec& s) -> std::unique_ptr<Layer<float>> {
                     return std::make_unique<L<float>>(s);
                   },
                   [](const LayerSpec& s) -> std::unique_ptr<Layer<double>> {
                     return std::make_unique<L<double>>(s);
                   }};
}

}  // namespace

const std::vector<LayerType>& LayerTypes() {
  static const std::vector<LayerType> kTypes = {
      Row<Dense>("dense", "dense(N)", 1, 1, {"units"}),
      Row<Conv2d>("conv", "conv(F,K[,stride=1,pad=0])", 2, 4,
                  {"filters", "kernel", "stride", "pad"}),
      Row<MaxPool>("maxpool", "maxpool(K[,stride=K])", 1, 2, {"size", "stride"}),
      Row<AvgPool>("avgpool", "avgpool(K[,stride=K])", 1, 2, {"size", "stride"}),
      Row<Relu>("relu", "relu", 0, 0, {}),
      Row<Tanh>("tanh", "tanh", 0, 0, {}),
      Row<Sigmoid>("sigmoid", "sigmoid", 0, 0, {}),
      Row<Dropout>("dropout", "dropout(P)", 0, 1, {"p"}),
      Row<Flatten>("flatten", "flatten", 0, 0, {}),
      Row<LayerNorm>("layernorm", "layernorm", 0, 0, {}),
  };
  return kTypes;
}

}  // namespace meshtrain::learn
