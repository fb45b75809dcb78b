// CPU helpers for kernels that work line by line along one dim (splinc, resize).
//
// The lines along dim d are grouped in tiles of W adjacent lines: adjacent along the other
// dim of smallest destination stride (the "lane" dim). A tile is copied into a buffer
// [len][W], processed with loops vectorised across the W lanes, and copied out. A strided dim
// thus moves whole cache lines, and the contiguous dim is transposed on the way in and out.
// Source and destination have the same sizes except along d; any strides (the source may
// have stride-0 dims; the destination may be the source itself).
//
// Torch-free: the kernel libraries of splinc and resize (core/host.h) include it; arrays come as
// pointers with a Layout, threads through core/parallel.h's host.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "core/host.h"
#include "core/parallel.h"

#if defined(_MSC_VER)
#define NJ_RESTRICT __restrict
#else
#define NJ_RESTRICT __restrict__
#endif

namespace nitorch_jit {
namespace lines {

template <typename T>
struct Lanes { static constexpr int W = 32; };  // 128 bytes of float
template <>
struct Lanes<double> { static constexpr int W = 16; };

// The sizes and strides (in elements) of a strided array.
struct Layout {
  std::vector<int64_t> size, stride;

  Layout() = default;
  Layout(const int64_t* sizes, const int64_t* strides, int64_t ndim)
      : size(sizes, sizes + ndim), stride(strides, strides + ndim) {}
  Layout(std::vector<int64_t> sizes, std::vector<int64_t> strides)
      : size(std::move(sizes)), stride(std::move(strides)) {}

  // A row-major array of these sizes (the strides torch gives a new contiguous tensor).
  static Layout contiguous(const std::vector<int64_t>& sizes) {
    std::vector<int64_t> st(sizes.size());
    int64_t s = 1;
    for (size_t k = sizes.size(); k-- > 0;) {
      st[k] = s;
      s *= sizes[k];
    }
    return Layout(sizes, std::move(st));
  }

  int64_t dim() const { return static_cast<int64_t>(size.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : size) n *= s;
    return n;
  }
  // torch's is_contiguous(): every dim of more than one element has its row-major stride
  bool is_contiguous() const {
    if (numel() == 0) return true;
    int64_t expected = 1;
    for (int64_t k = dim() - 1; k >= 0; --k) {
      if (size[k] == 1) continue;
      if (stride[k] != expected) return false;
      expected *= size[k];
    }
    return true;
  }
};

struct Tiling {
  int64_t nlane = 1, sL = 0, dL = 0;  // lane count and strides
  int64_t sN = 0, dN = 0;             // strides along d
  int64_t tiles_per_outer = 1, ntiles = 0;
  std::vector<int64_t> osize, os, od;  // outer dims: sizes, src strides, dst strides

  Tiling(const Layout& src, const Layout& dst, int64_t d, int W) {
    const int64_t D = src.dim();
    sN = src.stride[d];
    dN = dst.stride[d];
    int64_t lane = -1;
    for (int64_t k = 0; k < D; ++k) {
      if (k == d || dst.size[k] < 2) continue;
      if (lane < 0 || std::abs(dst.stride[k]) < std::abs(dst.stride[lane])) lane = k;
    }
    if (lane >= 0) {
      nlane = dst.size[lane];
      sL = src.stride[lane];
      dL = dst.stride[lane];
    }
    int64_t nouter = 1;
    for (int64_t k = 0; k < D; ++k) {
      if (k == d || k == lane || dst.size[k] < 2) continue;
      osize.push_back(dst.size[k]);
      os.push_back(src.stride[k]);
      od.push_back(dst.stride[k]);
      nouter *= dst.size[k];
    }
    tiles_per_outer = (nlane + W - 1) / W;
    ntiles = nouter * tiles_per_outer;
  }

  // Offsets of tile t in src and dst, and its number of live lanes.
  void tile(int64_t t, int W, int64_t& so, int64_t& dof, int& nl) const {
    int64_t o = t / tiles_per_outer;
    const int64_t l0 = (t % tiles_per_outer) * W;
    nl = static_cast<int>(std::min<int64_t>(W, nlane - l0));
    so = l0 * sL;
    dof = l0 * dL;
    for (int64_t k = static_cast<int64_t>(osize.size()) - 1; k >= 0; --k) {
      const int64_t i = o % osize[k];
      o /= osize[k];
      so += i * os[k];
      dof += i * od[k];
    }
  }
};

// Run body(begin, end, scratch) over [0, n) items of `cost` each (core/parallel.h's units), in
// chunks handed out dynamically: each worker thread makes its scratch once (make_scratch())
// and takes chunks from a shared counter until none is left. Unlike a static split, a thread
// that the OS delays (a busy machine) does not hold up the others with half of the work.
// Below core/parallel.h's threshold, or inside a parallel region, it runs inline.
template <typename MakeScratch, typename Body>
void parallel_chunks(int64_t n, int64_t cost, const MakeScratch& make_scratch,
                     const Body& body) {
  if (n <= 0) return;
  const int64_t threads = parallel::threads_for(n, cost);
  if (threads <= 1) {
    auto scratch = make_scratch();
    body(0, n, scratch);
    return;
  }
  // about 8 chunks per thread
  const int64_t chunk = n / (8 * threads) + 1;
  const int64_t nchunks = (n + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  host::parallel_for(0, std::min(threads, nchunks), 1, [&](int64_t, int64_t) {
    auto scratch = make_scratch();
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= nchunks) break;
      body(c * chunk, std::min(n, (c + 1) * chunk), scratch);
    }
  });
}

// buffer b[i * W + w] <- s[i * sN + w * sL], i < n, w < nl (lanes >= nl are zeroed)
template <int W, typename T>
inline void load(const T* s, int64_t n, int64_t sN, int64_t sL, int nl, T* b) {
  if (nl < W) std::fill(b, b + n * W, T(0));
  if (std::abs(sL) <= std::abs(sN)) {
    if (sL == 1 && nl == W) {
      for (int64_t i = 0; i < n; ++i) {
        const T* r = s + i * sN;
        T* q = b + i * W;
        for (int w = 0; w < W; ++w) q[w] = r[w];
      }
    } else {
      for (int64_t i = 0; i < n; ++i)
        for (int w = 0; w < nl; ++w) b[i * W + w] = s[i * sN + w * sL];
    }
  } else if (sN == 1) {
    for (int w = 0; w < nl; ++w) {
      const T* r = s + w * sL;
      for (int64_t i = 0; i < n; ++i) b[i * W + w] = r[i];
    }
  } else {
    for (int w = 0; w < nl; ++w)
      for (int64_t i = 0; i < n; ++i) b[i * W + w] = s[i * sN + w * sL];
  }
}

// d[i * dN + w * dL] <- b[i * W + w], i < n, w < nl
template <int W, typename T>
inline void store(T* d, int64_t n, int64_t dN, int64_t dL, int nl, const T* b) {
  if (std::abs(dL) <= std::abs(dN)) {
    if (dL == 1 && nl == W) {
      for (int64_t i = 0; i < n; ++i) {
        T* r = d + i * dN;
        const T* q = b + i * W;
        for (int w = 0; w < W; ++w) r[w] = q[w];
      }
    } else {
      for (int64_t i = 0; i < n; ++i)
        for (int w = 0; w < nl; ++w) d[i * dN + w * dL] = b[i * W + w];
    }
  } else if (dN == 1) {
    for (int w = 0; w < nl; ++w) {
      T* r = d + w * dL;
      for (int64_t i = 0; i < n; ++i) r[i] = b[i * W + w];
    }
  } else {
    for (int w = 0; w < nl; ++w)
      for (int64_t i = 0; i < n; ++i) d[i * dN + w * dL] = b[i * W + w];
  }
}

}  // namespace lines
}  // namespace nitorch_jit
