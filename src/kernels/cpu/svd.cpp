#include "kernels/svd.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace boostlm {

namespace {

// a = Q T Qᵀ with T tridiagonal (diag d, off-diagonal e[i] = T[i][i+1], e[n−1] = 0); a becomes Q.
// Householder reflections H = I − 2 v vᵀ zero each column below the subdiagonal in turn.
void tridiagonalise(std::vector<double>& a, int64_t n, std::vector<double>& d,
                    std::vector<double>& e) {
  std::vector<double> q(n * n, 0.0), v(n), p(n);
  for (int64_t i = 0; i < n; ++i) q[i * n + i] = 1.0;
  for (int64_t k = 0; k + 2 < n; ++k) {
    const int64_t first = k + 1, len = n - first;
    double norm = 0;
    for (int64_t i = 0; i < len; ++i) norm += a[(first + i) * n + k] * a[(first + i) * n + k];
    norm = std::sqrt(norm);
    if (norm == 0) continue;
    const double x0 = a[first * n + k];
    const double alpha = x0 > 0 ? -norm : norm;  // the sign that avoids cancellation
    for (int64_t i = 0; i < len; ++i) v[i] = a[(first + i) * n + k];
    v[0] -= alpha;
    double vnorm = 0;
    for (int64_t i = 0; i < len; ++i) vnorm += v[i] * v[i];
    vnorm = std::sqrt(vnorm);
    if (vnorm == 0) continue;
    for (int64_t i = 0; i < len; ++i) v[i] /= vnorm;
    // Trailing block S ← H S H = S − 2 v qᵀ − 2 q vᵀ, with p = S v, q = p − (vᵀp) v.
    double vp = 0;
    for (int64_t i = 0; i < len; ++i) {
      const double* row = &a[(first + i) * n + first];
      double s = 0;
      for (int64_t j = 0; j < len; ++j) s += row[j] * v[j];
      p[i] = s;
      vp += v[i] * s;
    }
    for (int64_t i = 0; i < len; ++i) p[i] -= vp * v[i];
    for (int64_t i = 0; i < len; ++i) {
      double* row = &a[(first + i) * n + first];
      for (int64_t j = 0; j < len; ++j) row[j] -= 2.0 * (v[i] * p[j] + p[i] * v[j]);
    }
    for (int64_t i = 0; i < len; ++i) a[(first + i) * n + k] = a[k * n + first + i] = 0.0;
    a[first * n + k] = a[k * n + first] = alpha;
    // Q ← Q H on columns first…n−1.
    for (int64_t r = 0; r < n; ++r) {
      double* row = &q[r * n + first];
      double s = 0;
      for (int64_t j = 0; j < len; ++j) s += row[j] * v[j];
      for (int64_t j = 0; j < len; ++j) row[j] -= 2.0 * s * v[j];
    }
  }
  d.assign(n, 0.0);
  e.assign(n, 0.0);
  for (int64_t i = 0; i < n; ++i) d[i] = a[i * n + i];
  for (int64_t i = 0; i + 1 < n; ++i) e[i] = a[i * n + i + 1];
  a.swap(q);
}

// Eigenvalues of the tridiagonal (d, e) by implicit QL sweeps with a shift from the leading 2×2
// block; every rotation is also applied to the vectors, held as the rows of zt (zᵀ) so that a
// rotation reads two contiguous rows rather than two strided columns.
void tridiagonal_ql(std::vector<double>& d, std::vector<double>& e, std::vector<double>& zt,
                    int64_t n) {
  const double eps = std::numeric_limits<double>::epsilon();
  for (int64_t l = 0; l < n; ++l) {
    for (int iter = 0;; ++iter) {
      int64_t m = l;
      for (; m + 1 < n; ++m)  // the first negligible off-diagonal splits the matrix
        if (std::fabs(e[m]) <= eps * (std::fabs(d[m]) + std::fabs(d[m + 1]))) break;
      if (m == l) break;
      BOOSTLM_ASSERT_MSG(iter < 60, "symmetric eigensolver did not converge");
      double g = (d[l + 1] - d[l]) / (2.0 * e[l]);
      double r = std::hypot(g, 1.0);
      g = d[m] - d[l] + e[l] / (g + std::copysign(r, g));
      double s = 1.0, c = 1.0, p = 0.0;
      int64_t i = m - 1;
      bool deflated = false;
      for (; i >= l; --i) {
        const double f = s * e[i], b = c * e[i];
        r = std::hypot(f, g);
        e[i + 1] = r;
        if (r == 0.0) {  // underflow: split here and sweep again
          d[i + 1] -= p;
          e[m] = 0.0;
          deflated = true;
          break;
        }
        s = f / r;
        c = g / r;
        g = d[i + 1] - p;
        r = (d[i] - g) * s + 2.0 * c * b;
        p = s * r;
        d[i + 1] = g + p;
        g = c * r - b;
        double* zi = &zt[i * n];
        double* zj = &zt[(i + 1) * n];
#pragma omp simd
        for (int64_t k = 0; k < n; ++k) {
          const double t = zj[k];
          zj[k] = s * zi[k] + c * t;
          zi[k] = c * zi[k] - s * t;
        }
      }
      if (deflated) continue;
      d[l] -= p;
      e[l] = g;
      e[m] = 0.0;
    }
  }
}

}  // namespace

void symmetric_eigen(std::vector<double>& a, int64_t n, std::vector<double>& values) {
  BOOSTLM_ASSERT(static_cast<int64_t>(a.size()) == n * n);
  std::vector<double> d, e;
  tridiagonalise(a, n, d, e);
  std::vector<double> zt(n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < n; ++k) zt[i * n + k] = a[k * n + i];
  tridiagonal_ql(d, e, zt, n);
  // Descending order, as columns.
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return d[x] > d[y]; });
  std::vector<double> sorted(n * n);
  values.resize(n);
  for (int64_t j = 0; j < n; ++j) {
    values[j] = d[order[j]];
    for (int64_t i = 0; i < n; ++i) sorted[i * n + j] = zt[order[j] * n + i];
  }
  a.swap(sorted);
}

SvdResult svd(const std::vector<double>& M, int64_t m, int64_t n) {
  BOOSTLM_ASSERT(static_cast<int64_t>(M.size()) == m * n);
  // Work on the side with the smaller Gram matrix: Mᵀ M [n, n] when n ≤ m, else M Mᵀ [m, m].
  const bool wide = n > m;
  const int64_t k = std::min(m, n), rows = wide ? n : m;  // rows: the long side
  auto at = [&](int64_t r, int64_t c) { return wide ? M[c * n + r] : M[r * n + c]; };
  std::vector<double> gram(k * k, 0.0);
  std::vector<double> row(k);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) row[c] = at(r, c);
    for (int64_t i = 0; i < k; ++i) {
      const double x = row[i];
      double* g = &gram[i * k];
      for (int64_t j = i; j < k; ++j) g[j] += x * row[j];
    }
  }
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < i; ++j) gram[i * k + j] = gram[j * k + i];
  std::vector<double> lambda;
  symmetric_eigen(gram, k, lambda);  // gram: the short side's singular vectors
  SvdResult out;
  out.m = m;
  out.n = n;
  out.k = k;
  out.sigma.resize(k);
  for (int64_t j = 0; j < k; ++j) out.sigma[j] = std::sqrt(std::max(lambda[j], 0.0));
  // The long side's vectors: (long-side matrix) · (short-side vector) / σ.
  std::vector<double> longv(rows * k, 0.0), vt(k * k);  // vt: the vectors as rows
  for (int64_t c = 0; c < k; ++c)
    for (int64_t j = 0; j < k; ++j) vt[j * k + c] = gram[c * k + j];
  const double tiny = out.sigma.empty() ? 0.0 : out.sigma[0] * 1e-300;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) row[c] = at(r, c);
    for (int64_t j = 0; j < k; ++j) {
      if (out.sigma[j] <= tiny) continue;  // a zero singular value: its vector does not matter
      double s = 0;
      const double* vj = &vt[j * k];
      for (int64_t c = 0; c < k; ++c) s += row[c] * vj[c];
      longv[r * k + j] = s / out.sigma[j];
    }
  }
  out.u = wide ? std::move(gram) : std::move(longv);
  out.v = wide ? std::move(longv) : std::move(gram);
  return out;
}

}  // namespace boostlm
