// fit_affine: ordinary least squares through a QR solve.
#include "calibration/least_squares.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <string>

#include "schedule/error.hpp"

namespace pipetwin::calibration {

AffineFit fit_affine(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) {
    throw Error("fit: " + std::to_string(x.size()) + " x values but " + std::to_string(y.size()) + " y values");
  }
  if (x.size() < 2) throw Error("fit: an affine fit needs at least two points");
  const auto n = static_cast<Eigen::Index>(x.size());
  Eigen::MatrixXd A(n, 2);
  Eigen::VectorXd b(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    A(i, 0) = 1.0;
    A(i, 1) = x[i];
    b(i) = y[i];
  }
  const Eigen::Vector2d coef = A.colPivHouseholderQr().solve(b);
  const Eigen::VectorXd residual = A * coef - b;
  return {coef(0), coef(1), std::sqrt(residual.squaredNorm() / static_cast<double>(n))};
}

}  // namespace pipetwin::calibration
