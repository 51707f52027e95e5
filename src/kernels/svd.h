// Singular value decomposition in fp64, for turning dense projections into low-rank factors
// (boostlm convert --to svd|cola). Through the symmetric eigenproblem of the Gram matrix of the
// smaller side: Householder tridiagonalisation, then implicit QL with Wilkinson-style shifts —
// O(n³) with n the smaller dimension (under a second for 512), no LAPACK.
//
// Forming MᵀM squares the condition number, so singular values far below σ_max·1e-8 lose relative
// accuracy; the leading ones a truncation keeps, and the product U diag(σ) Vᵀ, do not.
#pragma once

#include <cstdint>
#include <vector>

namespace boostlm {

// a: symmetric [n, n] row-major; on return its columns are the eigenvectors, `values` the
// eigenvalues, both in descending order of eigenvalue.
void symmetric_eigen(std::vector<double>& a, int64_t n, std::vector<double>& values);

struct SvdResult {
  int64_t m = 0, n = 0, k = 0;  // k = min(m, n)
  std::vector<double> sigma;    // [k], descending
  std::vector<double> u;        // [m, k] row-major
  std::vector<double> v;        // [n, k] row-major
};

// M [m, n] row-major = U diag(σ) Vᵀ.
SvdResult svd(const std::vector<double>& M, int64_t m, int64_t n);

}  // namespace boostlm
